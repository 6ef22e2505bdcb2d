-- workflow_events and workflow_turns are appended at every step of every
-- workflow. Their foreign keys to workflows checked each appended row: a
-- lookup of the parent and a share lock on it, some 13 per simple
-- workflow (11 events, 2 turns). In bench/simple-path, seven alternated
-- pairs of runs without and with this migration (2026-12-01): PostgreSQL's
-- CPU per workflow at concurrency 32 fell in every pair, by 0.07-0.69 ms,
-- from 1.97 to 1.67 ms on average.
--
-- Nothing is lost without them: whatever appends these rows takes the
-- workflow id from the workflow row it has just updated in the same
-- statement or transaction (src/store/workflow-events.ts), so the parent
-- exists and is locked while they are written, and a concurrent delete
-- leaves that update, and so the append, nothing to match. What the keys'
-- ON DELETE CASCADE did, the trigger below does for any delete of
-- workflows: the retention sweep, a tenant's cascade, or an operator's
-- own DELETE. It runs once per statement, so deleting a batch of
-- workflows costs two deletes, not two per workflow.
ALTER TABLE workflow_events DROP CONSTRAINT workflow_events_workflow_id_fkey;
ALTER TABLE workflow_turns DROP CONSTRAINT workflow_turns_workflow_id_fkey;

CREATE FUNCTION delete_workflow_step_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM workflow_events e USING deleted_workflows d WHERE e.workflow_id = d.id;
  DELETE FROM workflow_turns t USING deleted_workflows d WHERE t.workflow_id = d.id;
  RETURN NULL;
END
$$;

CREATE TRIGGER workflows_delete_step_rows
  AFTER DELETE ON workflows
  REFERENCING OLD TABLE AS deleted_workflows
  FOR EACH STATEMENT EXECUTE FUNCTION delete_workflow_step_rows();
