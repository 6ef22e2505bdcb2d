import { sql } from 'kysely';
import type { Logger } from 'pino';
import { createPeriodicTask } from '../periodic.js';
import type { Db } from '../store/database.js';

export interface RetentionSweeperOptions {
  db: Db;
  log: Logger;
  /** Finished workflows are deleted this many days after `finished_at`; 0 disables the sweep. */
  retentionDays: number;
  /** Pause between the end of one sweep and the start of the next. */
  intervalMs: number;
  /** Workflows per DELETE; each batch is its own short transaction. */
  batchSize?: number;
}

const DAY_MS = 86_400_000;

/**
 * Deletes finished workflows (completed, failed, cancelled) once they are
 * older than the retention age; their events and turns go with them (the
 * trigger of migration 0011), their pipeline rows by ON DELETE CASCADE.
 * Every replica runs one, so the sweep keeps working whichever replicas
 * are up.
 */
export function createRetentionSweeper(options: RetentionSweeperOptions) {
  const log = options.log.child({ component: 'retention' });
  const batchSize = options.batchSize ?? 500;

  /**
   * One batch, oldest first. FOR UPDATE SKIP LOCKED: replicas sweeping at
   * the same moment each take rows the others have not locked, so no
   * replica waits behind another's batch (or deadlocks on an overlapping
   * one) and every row is deleted once. Batches keep each transaction's
   * locks and WAL small, so a backlog of a million rows never holds one
   * long transaction. `finished_at < cutoff` implies NOT NULL, so the
   * partial index workflows_finished serves the scan.
   */
  async function deleteBatch(cutoff: Date): Promise<number> {
    const result = await sql`
      DELETE FROM workflows
      WHERE id IN (
        SELECT id FROM workflows
        WHERE finished_at < ${cutoff} AND status IN ('completed', 'failed', 'cancelled')
        ORDER BY finished_at
        LIMIT ${batchSize}
        FOR UPDATE SKIP LOCKED
      )`.execute(options.db);
    return Number(result.numAffectedRows ?? 0n);
  }

  /** Deletes every workflow past retention at `now`, batch by batch; returns how many. */
  async function sweepOnce(now: Date = new Date()): Promise<number> {
    if (options.retentionDays === 0) return 0;
    const cutoff = new Date(now.getTime() - options.retentionDays * DAY_MS);
    let deleted = 0;
    for (;;) {
      const count = await deleteBatch(cutoff);
      deleted += count;
      // A short batch means nothing unlocked is left; rows another replica
      // holds are its to delete.
      if (count < batchSize || task.stopped()) break;
    }
    if (deleted > 0) log.info({ deleted, cutoff }, 'deleted finished workflows past retention');
    return deleted;
  }

  const task = createPeriodicTask({
    intervalMs: options.intervalMs,
    run: () => sweepOnce(),
    log,
    failureMessage: 'retention sweep failed',
  });

  return {
    /** Sweeps now, then `intervalMs` after each sweep ends; a no-op when retention is 0. */
    start(): void {
      if (options.retentionDays === 0) {
        log.info('workflow retention disabled; finished workflows are kept');
        return;
      }
      // First sweep at once: replicas redeployed more often than the
      // interval would otherwise never sweep.
      task.start();
    },

    sweepOnce,

    /** Cancels the next sweep and waits for one in progress to end its current batch. */
    stop: task.stop,
  };
}

export type RetentionSweeper = ReturnType<typeof createRetentionSweeper>;
