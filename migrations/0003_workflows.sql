-- Workflows, their events (the WorkflowTracker's durable log) and
-- service-wide secrets shared by all replicas.

CREATE TABLE workflows (
  id uuid PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  session_id text,
  status text NOT NULL
    CHECK (status IN ('queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled')),
  awaiting_reason text CHECK (awaiting_reason IN ('checkpoint', 'clarification', 'stage_failed')),
  mode text NOT NULL CHECK (mode IN ('auto', 'simple', 'complex')),
  -- Decided by classification; NULL until then.
  kind text CHECK (kind IN ('simple', 'complex')),
  model text NOT NULL,
  input text NOT NULL,
  tools text[] NOT NULL DEFAULT '{}',
  metadata jsonb NOT NULL DEFAULT '{}',
  idempotency_key text,
  -- SHA-256 of the create request, to tell a retry from a different request under the same key.
  request_hash text,
  -- Bumped by every transition; clients send the version they saw to act on a paused workflow.
  version integer NOT NULL DEFAULT 1,
  -- Highest event seq appended; the row lock on it serialises emitters.
  last_seq integer NOT NULL DEFAULT 0,
  lease_owner text,
  lease_expires_at timestamptz,
  result jsonb,
  error jsonb,
  input_tokens bigint NOT NULL DEFAULT 0,
  output_tokens bigint NOT NULL DEFAULT 0,
  cached_input_tokens bigint NOT NULL DEFAULT 0,
  cost_usd numeric(14, 8) NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz,
  CHECK ((status = 'awaiting_input') = (awaiting_reason IS NOT NULL)),
  CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);

CREATE UNIQUE INDEX workflows_idempotency ON workflows (tenant_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
-- Listing newest first with keyset pagination.
CREATE INDEX workflows_tenant_created ON workflows (tenant_id, created_at DESC, id DESC);
CREATE INDEX workflows_tenant_session ON workflows (tenant_id, session_id, created_at DESC)
  WHERE session_id IS NOT NULL;
-- Retention sweep.
CREATE INDEX workflows_finished ON workflows (finished_at) WHERE finished_at IS NOT NULL;
-- Lease reclaim.
CREATE INDEX workflows_leases ON workflows (lease_expires_at) WHERE status IN ('queued', 'running');

-- Append-only; (workflow_id, seq) is gap-free from 1.
CREATE TABLE workflow_events (
  workflow_id uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  seq integer NOT NULL CHECK (seq >= 1),
  tenant_id uuid NOT NULL,
  type text NOT NULL,
  step text,
  status text NOT NULL,
  detail jsonb NOT NULL DEFAULT '{}',
  ts timestamptz NOT NULL DEFAULT clock_timestamp(),
  elapsed_ms integer,
  PRIMARY KEY (workflow_id, seq)
);

CREATE TABLE service_secrets (
  name text PRIMARY KEY,
  value bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
