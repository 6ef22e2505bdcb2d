-- The workflows table's seven CHECK constraints become one that says the
-- same. Why: PostgreSQL reads and plans every CHECK constraint of a table
-- again for each statement that inserts or updates a row of it (from its
-- stored node tree, which spells each constant out byte by byte), and a
-- workflow's simple path writes its row in three statements. Replayed
-- against PostgreSQL 18 (the simple path's three statements, alternated in
-- blocks, 2026-12-05): the seven cost ~45 µs of the backend's time per
-- statement (against none), this one ~30 µs. Profiled, checking CHECK
-- constraints (these and the other tables' few) was ~15% of the backend's
-- CPU on those statements.
--
-- Each value list is one array constant rather than an IN list of
-- constants (smaller to read back). A row that breaks it is refused with
-- the same error (23514) naming this constraint, not the part it breaks.
--
-- The new check allows exactly the rows the old ones did together: NOT
-- VALID spares the scan of the table under this migration's lock, and rows
-- written from now on are checked as before.
ALTER TABLE workflows
  DROP CONSTRAINT workflows_status_check,
  DROP CONSTRAINT workflows_awaiting_reason_check,
  DROP CONSTRAINT workflows_mode_check,
  DROP CONSTRAINT workflows_kind_check,
  DROP CONSTRAINT workflows_budget_check,
  DROP CONSTRAINT workflows_check,
  DROP CONSTRAINT workflows_check1,
  ADD CONSTRAINT workflows_row_check CHECK (
    status = ANY ('{queued,running,awaiting_input,completed,failed,cancelled}'::text[])
    AND awaiting_reason
      = ANY ('{checkpoint,clarification,stage_failed,synthesis_failed,tool_approval}'::text[])
    AND mode = ANY ('{auto,simple,complex}'::text[])
    AND kind = ANY ('{simple,complex}'::text[])
    AND (budget IS NULL OR jsonb_typeof(budget) = 'object')
    -- Paused exactly when a reason says why; finished exactly when ended.
    AND (status = 'awaiting_input') = (awaiting_reason IS NOT NULL)
    AND (status = ANY ('{completed,failed,cancelled}'::text[])) = (finished_at IS NOT NULL)
  ) NOT VALID;
