-- Model choice per tenant and the usage ledger of every model call attempt.

-- NULL: the system default model.
ALTER TABLE tenants ADD COLUMN default_model text;
-- NULL: every model of the catalogue; otherwise only these catalogue names.
ALTER TABLE tenants ADD COLUMN allowed_models text[];

-- One row per attempt (retries and fallbacks are attempts too). Append-only.
CREATE TABLE llm_calls (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  -- No foreign key: workflows arrive in a later migration, and ledger rows
  -- outlive the workflows that the retention sweep removes.
  workflow_id uuid,
  provider text NOT NULL,
  model text NOT NULL,
  model_id text NOT NULL,
  attempt integer NOT NULL CHECK (attempt >= 1),
  input_tokens integer NOT NULL CHECK (input_tokens >= 0),
  output_tokens integer NOT NULL CHECK (output_tokens >= 0),
  cached_input_tokens integer NOT NULL CHECK (cached_input_tokens >= 0),
  cache_write_tokens integer NOT NULL CHECK (cache_write_tokens >= 0),
  cost_usd numeric(14, 8) NOT NULL,
  latency_ms integer NOT NULL,
  ttft_ms integer,
  -- 'ok' or the LlmError kind that ended the attempt.
  outcome text NOT NULL,
  started_at timestamptz NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX llm_calls_tenant_time ON llm_calls (tenant_id, started_at);
CREATE INDEX llm_calls_workflow ON llm_calls (workflow_id) WHERE workflow_id IS NOT NULL;
