import { sql } from 'kysely';
import type { Logger } from 'pino';
import { daysBefore } from '../days.js';
import { createPeriodicTask } from '../periodic.js';
import { apiKeysRepository } from '../store/api-keys.js';
import { type Db, isDatabaseUnavailable, isStatementCancelled } from '../store/database.js';
import { atMicros, microsOf } from '../store/list-position.js';
import { llmCallsRepository } from '../store/llm-calls.js';
import type { ExpiredPause } from './cancellation.js';

export interface RetentionSweeperOptions {
  db: Db;
  log: Logger;
  /** Finished workflows are deleted this many days after `finished_at`; 0 keeps them. */
  retentionDays: number;
  /** Usage ledger rows are deleted this many days after `started_at`; 0 (the default) keeps them. */
  ledgerRetentionDays?: number;
  /** Revoked API keys are deleted this many days after `revoked_at`; 0 (the default) keeps them. */
  revokedKeyRetentionDays?: number;
  /** Pause between the end of one sweep and the start of the next. */
  intervalMs: number;
  /** Rows per DELETE at first; each batch is its own short transaction. */
  batchSize?: number;
  /**
   * Paused workflows are ended (`cancelled`, `input_expired`) this many
   * days after they paused, by `expire` (WorkflowService's
   * `expirePaused`); unset or 0 (the default): they wait for good.
   */
  pausedExpiry?: { days: number; expire: (paused: ExpiredPause) => Promise<boolean> };
  /**
   * What each sweep did (the metrics count it), also a sweep that stopped
   * on an error: the batches that committed before it.
   */
  onSwept?: (counts: SweepCounts) => void;
}

/** What one sweep deleted, and ended. */
export interface SweepCounts {
  workflows: number;
  llmCalls: number;
  /** API keys revoked or expired more than REVOKED_KEY_RETENTION_DAYS ago. */
  apiKeys: number;
  /** Paused workflows ended because they waited for input past PAUSED_WORKFLOW_EXPIRY_DAYS. */
  expired: number;
}

/** Where an expiry sweep is in (paused_at, id) order: paused_at in microseconds, which a JS Date would cut. */
interface PausePosition {
  pausedAtUs: string;
  id: string;
}

/** What the sweep deletes past an age: rows of `table` older than `days` (0: kept), `remove` taking a batch. */
interface Purge {
  table: 'workflows' | 'llm_calls' | 'api_keys';
  days: number;
  count: 'workflows' | 'llmCalls' | 'apiKeys';
  remove: (cutoff: Date, limit: number) => Promise<number>;
  message: string;
}

/**
 * Ends paused workflows that have waited for input past their expiry, when
 * it is set, as a cancel does. Deletes finished workflows (completed,
 * failed, cancelled) once they are older than the retention age; their
 * events and turns go with them (the trigger of migration 0011), their
 * pipeline rows by ON DELETE CASCADE. Deletes usage ledger rows past
 * theirs, when it is set: the ledger outlives the workflows it counts.
 * Deletes API keys revoked longer ago than theirs, when it is set.
 * Every replica runs one, so the sweep keeps working whichever replicas
 * are up.
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
  const limits = {
    workflows: batchSize,
    llm_calls: batchSize,
    api_keys: batchSize,
    paused: batchSize,
  };
  const ledgerRetentionDays = options.ledgerRetentionDays ?? 0;
  const revokedKeyRetentionDays = options.revokedKeyRetentionDays ?? 0;
  const pausedExpiry = options.pausedExpiry?.days ? options.pausedExpiry : undefined;
  const enabled =
    options.retentionDays > 0 ||
    ledgerRetentionDays > 0 ||
    revokedKeyRetentionDays > 0 ||
    pausedExpiry !== undefined;

  /**
   * Paused workflows whose pause is older than `cutoff`, oldest first,
   * after `after`: read, not locked. Each is then ended by its own
   * transition, which locks its row FOR UPDATE SKIP LOCKED and checks it
   * still waits at the version read here: replicas sweeping at the same
   * moment never wait for one another (one ends a workflow, the others
   * find it held or ended), a row an answer or review holds is left to it,
   * and each end is one short transaction, whatever the backlog. The
   * position moves past a row left alone, so a row held for long never
   * keeps a sweep going. Served by the partial index workflows_paused
   * (migration 0019).
   */
  async function pausedBefore(cutoff: Date, after: PausePosition | undefined, limit: number) {
    const { rows } = await sql<{
      id: string;
      tenant_id: string;
      version: number;
      paused_at_us: string;
    }>`
      SELECT id, tenant_id, version, ${microsOf('paused_at')} AS paused_at_us
      FROM workflows
      WHERE paused_at < ${cutoff}
        ${
          after
            ? sql`AND (paused_at, id) > (${atMicros(after.pausedAtUs)}, ${after.id}::uuid)`
            : sql``
        }
      ORDER BY paused_at, id
      LIMIT ${limit}`.execute(options.db);
    return rows;
  }

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
   * Runs `batch` until a short one (or a stop); `batch` returns how many
   * rows it took (deleted, or read to expire). A batch cancelled
   * (statement_timeout) is run again at half the size, down to one row.
   */
  async function inBatches(
    table: keyof typeof limits,
    batch: (limit: number) => Promise<number>,
  ): Promise<void> {
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
          `a batch of ${limit} rows was cancelled (statement_timeout); taking ${limits[table]} at a time`,
        );
        continue;
      }
      // A short batch means nothing unlocked is left; rows another replica
      // holds are its to delete.
      if (count < limit || task.stopped()) return;
    }
  }

  /** Ends the workflows paused before `cutoff`, batch by batch, counting each in `counts.expired`. */
  async function expireAll(
    cutoff: Date,
    expiry: NonNullable<RetentionSweeperOptions['pausedExpiry']>,
    counts: SweepCounts,
  ): Promise<void> {
    let after: PausePosition | undefined;
    await inBatches('paused', async (limit) => {
      const rows = await pausedBefore(cutoff, after, limit);
      for (const row of rows) {
        // Stopped mid-batch: the rest of it is the next sweep's (on this replica or another).
        if (task.stopped()) return 0;
        after = { pausedAtUs: row.paused_at_us, id: row.id };
        try {
          const ended = await expiry.expire({
            tenantId: row.tenant_id,
            id: row.id,
            version: row.version,
            expiryDays: expiry.days,
          });
          if (ended) counts.expired += 1;
        } catch (error) {
          // The database away stops the sweep; a row that fails alone (a
          // trigger, a constraint of the operator's) is left to the next
          // sweep, and this one goes on to the others and the deletes.
          if (isDatabaseUnavailable(error)) throw error;
          log.warn(
            { err: error, workflowId: row.id },
            'ending a paused workflow past its expiry failed; the next sweep tries again',
          );
        }
      }
      return rows.length;
    });
  }

  /** The deletes past an age, in this order, each in batches. */
  const purges: Purge[] = [
    {
      table: 'workflows',
      days: options.retentionDays,
      count: 'workflows',
      remove: deleteWorkflowBatch,
      message: 'deleted finished workflows past retention',
    },
    {
      table: 'llm_calls',
      days: ledgerRetentionDays,
      count: 'llmCalls',
      remove: llmCallsRepository(options.db).deleteStartedBefore,
      message: 'deleted usage ledger rows past retention',
    },
    {
      table: 'api_keys',
      days: revokedKeyRetentionDays,
      count: 'apiKeys',
      remove: apiKeysRepository(options.db).deleteEndedBefore,
      message: 'deleted API keys revoked past retention',
    },
  ];

  /**
   * Ends the paused workflows past their expiry, then deletes every
   * workflow, ledger row and revoked key past its retention at `now`,
   * batch by batch.
   */
  async function sweepOnce(now: Date = new Date()): Promise<SweepCounts> {
    // Counted batch by batch, so a sweep the database stops still reports what committed.
    const counts: SweepCounts = { workflows: 0, llmCalls: 0, apiKeys: 0, expired: 0 };
    try {
      await sweepInto(counts, now);
    } finally {
      options.onSwept?.(counts);
    }
    return counts;
  }

  async function sweepInto(counts: SweepCounts, now: Date): Promise<void> {
    if (pausedExpiry) {
      const cutoff = daysBefore(now, pausedExpiry.days);
      await expireAll(cutoff, pausedExpiry, counts);
      if (counts.expired > 0)
        log.info(
          { expired: counts.expired, cutoff },
          'cancelled paused workflows that waited for input past their expiry',
        );
    }
    for (const purge of purges) {
      if (purge.days === 0 || task.stopped()) continue;
      const cutoff = daysBefore(now, purge.days);
      await inBatches(purge.table, async (limit) => {
        const deleted = await purge.remove(cutoff, limit);
        counts[purge.count] += deleted;
        return deleted;
      });
      if (counts[purge.count] > 0)
        log.info({ deleted: counts[purge.count], cutoff }, purge.message);
    }
  }

  const task = createPeriodicTask({
    intervalMs: options.intervalMs,
    run: () => sweepOnce(),
    log,
    failureMessage: 'retention sweep failed',
  });

  return {
    /** Sweeps now, then `intervalMs` after each sweep ends; a no-op when every retention and the expiry are 0. */
    start(): void {
      if (!enabled) {
        log.info(
          'retention disabled; finished workflows, the usage ledger and revoked API keys are kept, paused workflows wait for good',
        );
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
