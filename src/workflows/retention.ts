import { sql } from 'kysely';
import type { Logger } from 'pino';
import { createPeriodicTask } from '../periodic.js';
import { type Db, isStatementCancelled } from '../store/database.js';
import { llmCallsRepository } from '../store/llm-calls.js';

export interface RetentionSweeperOptions {
  db: Db;
  log: Logger;
  /** Finished workflows are deleted this many days after `finished_at`; 0 keeps them. */
  retentionDays: number;
  /** Usage ledger rows are deleted this many days after `started_at`; 0 (the default) keeps them. */
  ledgerRetentionDays?: number;
  /** Pause between the end of one sweep and the start of the next. */
  intervalMs: number;
  /** Rows per DELETE at first; each batch is its own short transaction. */
  batchSize?: number;
}

/** What one sweep deleted. */
export interface SweepCounts {
  workflows: number;
  llmCalls: number;
}

const DAY_MS = 86_400_000;

/**
 * Deletes finished workflows (completed, failed, cancelled) once they are
 * older than the retention age; their events and turns go with them (the
 * trigger of migration 0011), their pipeline rows by ON DELETE CASCADE.
 * Deletes usage ledger rows past theirs, when it is set: the ledger
 * outlives the workflows it counts. Every replica runs one, so the sweep
 * keeps working whichever replicas are up.
 */
export function createRetentionSweeper(options: RetentionSweeperOptions) {
  const log = options.log.child({ component: 'retention' });
  const batchSize = options.batchSize ?? 500;
  /**
   * Rows per DELETE, by table: halved when a batch runs past the
   * database's `statement_timeout`, and kept so for this sweeper's life.
   * Before, a batch the timeout could not fit failed every sweep, and
   * nothing was ever deleted again.
   */
  const limits = { workflows: batchSize, llm_calls: batchSize };
  const ledgerRetentionDays = options.ledgerRetentionDays ?? 0;
  const enabled = options.retentionDays > 0 || ledgerRetentionDays > 0;

  /**
   * One batch, oldest first. FOR UPDATE SKIP LOCKED: replicas sweeping at
   * the same moment each take rows the others have not locked, so no
   * replica waits behind another's batch (or deadlocks on an overlapping
   * one) and every row is deleted once. Batches keep each transaction's
   * locks and WAL small, so a backlog of a million rows never holds one
   * long transaction. `finished_at < cutoff` implies NOT NULL, so the
   * partial index workflows_finished serves the scan.
   */
  async function deleteWorkflowBatch(cutoff: Date, limit: number): Promise<number> {
    const result = await sql`
      DELETE FROM workflows
      WHERE id IN (
        SELECT id FROM workflows
        WHERE finished_at < ${cutoff} AND status IN ('completed', 'failed', 'cancelled')
        ORDER BY finished_at
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      )`.execute(options.db);
    return Number(result.numAffectedRows ?? 0n);
  }

  /**
   * Runs `batch` until a short one (or a stop); returns how many rows they
   * deleted. A batch cancelled (statement_timeout) is run again at half
   * the size, down to one row.
   */
  async function deleteAll(
    table: keyof typeof limits,
    batch: (limit: number) => Promise<number>,
  ): Promise<number> {
    let deleted = 0;
    for (;;) {
      const limit = limits[table];
      let count: number;
      try {
        count = await batch(limit);
      } catch (error) {
        if (!isStatementCancelled(error) || limit === 1) throw error;
        limits[table] = Math.ceil(limit / 2);
        log.warn(
          { err: error, table, batchSize: limits[table] },
          `a delete of ${limit} rows was cancelled (statement_timeout); deleting ${limits[table]} at a time`,
        );
        continue;
      }
      deleted += count;
      // A short batch means nothing unlocked is left; rows another replica
      // holds are its to delete.
      if (count < limit || task.stopped()) return deleted;
    }
  }

  /** Deletes every workflow and ledger row past its retention at `now`, batch by batch. */
  async function sweepOnce(now: Date = new Date()): Promise<SweepCounts> {
    const counts: SweepCounts = { workflows: 0, llmCalls: 0 };
    if (options.retentionDays > 0) {
      const cutoff = new Date(now.getTime() - options.retentionDays * DAY_MS);
      counts.workflows = await deleteAll('workflows', (limit) =>
        deleteWorkflowBatch(cutoff, limit),
      );
      if (counts.workflows > 0)
        log.info(
          { deleted: counts.workflows, cutoff },
          'deleted finished workflows past retention',
        );
    }
    if (ledgerRetentionDays > 0 && !task.stopped()) {
      const cutoff = new Date(now.getTime() - ledgerRetentionDays * DAY_MS);
      const ledger = llmCallsRepository(options.db);
      counts.llmCalls = await deleteAll('llm_calls', (limit) =>
        ledger.deleteStartedBefore(cutoff, limit),
      );
      if (counts.llmCalls > 0)
        log.info({ deleted: counts.llmCalls, cutoff }, 'deleted usage ledger rows past retention');
    }
    return counts;
  }

  const task = createPeriodicTask({
    intervalMs: options.intervalMs,
    run: () => sweepOnce(),
    log,
    failureMessage: 'retention sweep failed',
  });

  return {
    /** Sweeps now, then `intervalMs` after each sweep ends; a no-op when both retentions are 0. */
    start(): void {
      if (!enabled) {
        log.info('retention disabled; finished workflows and the usage ledger are kept');
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
