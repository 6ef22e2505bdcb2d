-- A workflow taken over again and again at the same point is failed
-- instead of being passed from replica to replica forever. Its run may be
-- what kills its runner (a crash it causes, a statement that always loses
-- its connection), and every takeover costs a model call at least, and
-- possibly the replica that takes it.
--
-- takeovers_without_progress: takeovers in a row with nothing completed in
-- between (no tool-loop turn, no stage attempt, no plan), this one included;
-- 1 after a takeover that found progress since the one before.
-- progress_at_takeover: what was completed at the last takeover (turns +
-- completed stage attempts + plan revisions); NULL before the first.
-- Written by the lease sweep only (src/store/workflows.ts
-- claimExpiredLeases), never on a run's path.
ALTER TABLE workflows
  ADD COLUMN takeovers_without_progress integer NOT NULL DEFAULT 0,
  ADD COLUMN progress_at_takeover integer;
