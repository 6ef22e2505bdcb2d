-- Sessions: conversations that group workflows. A workflow with a session
-- sees the session's history; its question and answer are appended when it
-- completes. Messages are appended as rows, never rewritten as a blob.

CREATE TABLE sessions (
  id uuid PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  title text CHECK (length(title) BETWEEN 1 AND 200),
  metadata jsonb NOT NULL DEFAULT '{}',
  -- Highest message seq appended; the row lock on it serialises appenders.
  last_seq integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX sessions_tenant_created ON sessions (tenant_id, created_at DESC, id DESC);

-- Append-only; (session_id, seq) is gap-free from 1.
CREATE TABLE session_messages (
  session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq integer NOT NULL CHECK (seq >= 1),
  tenant_id uuid NOT NULL,
  role text NOT NULL CHECK (role IN ('user', 'assistant')),
  content text NOT NULL,
  -- The workflow whose question or answer this is. No foreign key: messages
  -- outlive the workflows that the retention sweep removes.
  workflow_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, seq)
);

-- A workflow's question and answer are appended once, however often its completion is retried.
CREATE UNIQUE INDEX session_messages_workflow ON session_messages (session_id, workflow_id, role)
  WHERE workflow_id IS NOT NULL;
