-- The tool loop's progress: one row per completed model turn (the assistant
-- message with its tool calls, and the results of those calls), appended
-- before the next turn starts. Another replica rebuilds the conversation
-- from these rows; nothing rewrites a growing blob at every turn.

CREATE TABLE workflow_turns (
  workflow_id uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  turn integer NOT NULL CHECK (turn >= 1),
  tenant_id uuid NOT NULL,
  -- Versioned: `schemaVersion` says how to read it (src/orchestrator/tool-loop/state.ts).
  state jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, turn)
);
