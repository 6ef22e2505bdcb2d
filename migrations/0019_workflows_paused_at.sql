-- When a paused workflow paused: PAUSED_WORKFLOW_EXPIRY_DAYS ends the
-- workflows that have waited for input longer than that
-- (src/workflows/retention.ts), and finds them through this column's index.
--
-- Not updated_at, though it holds the same time on a paused row: every
-- event appended between transitions sets updated_at, so an index reading
-- it (as a column, an expression or a predicate) would make each of those
-- appends, a run's most frequent write, a non-HOT update writing a new
-- entry into every index of the table (see migration 0013). paused_at is
-- written by the transitions alone (src/workflows/transition-statement.ts
-- and transition-batches.ts): the time of a pause, NULL at every other
-- transition. NULL stays NULL on the rows that run, so their updates stay
-- HOT; the pauses and resumes that change it change awaiting_reason too,
-- which workflows_leases reads already.
--
-- No CHECK ties it to status: rows written before this migration get
-- their updated_at below, and a paused row without one (written by hand)
-- is only never expired.
ALTER TABLE workflows ADD COLUMN paused_at timestamptz;

-- A paused row's updated_at is its pause: nothing but a transition
-- changes a paused workflow (its run stopped, and lost its lease, at the
-- pause). A scan of the table, in the migration transaction like the index.
UPDATE workflows SET paused_at = updated_at WHERE awaiting_reason IS NOT NULL;

-- Oldest pause first, (paused_at, id) the sweep's position between batches.
CREATE INDEX workflows_paused ON workflows (paused_at, id) WHERE paused_at IS NOT NULL;
