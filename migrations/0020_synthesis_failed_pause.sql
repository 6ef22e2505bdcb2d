-- A pipeline whose final synthesis failed pauses (awaiting_input,
-- synthesis_failed) for a `retry` of the synthesis alone, rather than
-- failing with every stage's result done (src/orchestrator/pipeline/
-- run-pipeline.ts, review.ts).
--
-- The new check allows every value the old one did: NOT VALID spares the
-- scan of the table under this migration's lock, and rows written from
-- now on are checked as before.
ALTER TABLE workflows DROP CONSTRAINT workflows_awaiting_reason_check;
ALTER TABLE workflows ADD CONSTRAINT workflows_awaiting_reason_check
  CHECK (awaiting_reason IN ('checkpoint', 'clarification', 'stage_failed', 'synthesis_failed')) NOT VALID;
