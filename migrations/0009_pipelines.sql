-- The pipeline (complex path): its plan and every attempt of every stage.
-- Both grow by appending rows: a stage attempt is one row written when it
-- starts and updated once when it ends; nothing rewrites the accumulated
-- state at each step, so storage grows linearly with the stages run.

-- One row per plan revision: the planner writes revision 1; a `modify`
-- with a plan patch appends the next revision. Attempts name the revision
-- they ran under.
CREATE TABLE workflow_plans (
  workflow_id uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  revision integer NOT NULL CHECK (revision >= 1),
  tenant_id uuid NOT NULL,
  -- Versioned: `schemaVersion` says how to read it (src/orchestrator/pipeline/plan.ts).
  plan jsonb NOT NULL CHECK (jsonb_typeof(plan) = 'object'),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, revision)
);

-- One row per attempt of a stage, numbered from 1 per stage.
-- pending: a re-run the user asked for (retry / modify) that has not started;
-- started: running, or cut off by a crash (the next run fails it as interrupted);
-- completed / failed: finished, with validation, usage and timing.
CREATE TABLE workflow_stage_attempts (
  workflow_id uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  stage_id text NOT NULL,
  attempt integer NOT NULL CHECK (attempt >= 1),
  tenant_id uuid NOT NULL,
  plan_revision integer NOT NULL CHECK (plan_revision >= 1),
  status text NOT NULL CHECK (status IN ('pending', 'started', 'completed', 'failed')),
  -- Why this attempt runs: first run, automatic retry after failed validation,
  -- the user's retry or modify, or a re-run after an interrupted attempt.
  reason text NOT NULL
    CHECK (reason IN ('first', 'validation_retry', 'user_retry', 'user_modify', 'resumed')),
  -- The user's feedback the attempt was given (modify), if any.
  feedback text,
  result text,
  -- {"schemaVersion": 1, "passed": bool, "findings": [string]}; NULL when the attempt produced nothing to check.
  validation jsonb,
  -- {"code", "message"} of a failure other than validation (model error, interrupted).
  error jsonb,
  input_tokens integer NOT NULL DEFAULT 0,
  output_tokens integer NOT NULL DEFAULT 0,
  cached_input_tokens integer NOT NULL DEFAULT 0,
  cost_usd numeric(14, 8) NOT NULL DEFAULT 0,
  -- Set by `continue`: the user accepts this attempt's outcome (a checkpoint
  -- result, or a stage failure to move past) and the pipeline goes on.
  accepted_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz,
  elapsed_ms integer,
  PRIMARY KEY (workflow_id, stage_id, attempt),
  CHECK ((status = 'pending') = (started_at IS NULL)),
  CHECK ((status IN ('completed', 'failed')) = (finished_at IS NOT NULL))
);
