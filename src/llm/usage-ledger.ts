import type { Logger } from 'pino';
import { type Db, isValueRefused } from '../store/database.js';
import { llmCallsRepository } from '../store/llm-calls.js';
import type { NewLlmCallRow } from '../store/schema.js';
import type { AttemptRecord } from './router/types.js';

/**
 * Records every model call attempt in Postgres. `record` only queues, so a
 * model call never waits for the ledger; a background flush writes batches
 * (one INSERT per batch) every `flushIntervalMs` or at `maxBatch` rows, and
 * `close` writes what is left at shutdown. A failed write is retried on the
 * next flush (rows stay queued, up to `maxQueued`, beyond which the oldest
 * are dropped and counted in the log rather than growing memory forever).
 *
 * A queued row is lost with its process (a SIGKILL, a crash), while the
 * events that count its call's usage in the workflow may have committed:
 * the workflow would then count a call the ledger never got. So a run
 * writes nothing before its workflow's queued rows (`writtenFirst`): the
 * ledger holds every call a workflow counts, whenever the process dies.
 */
export interface UsageLedgerOptions {
  db: Db;
  log: Logger;
  flushIntervalMs?: number;
  maxBatch?: number;
  maxQueued?: number;
}

export function createUsageLedger(options: UsageLedgerOptions) {
  const flushIntervalMs = options.flushIntervalMs ?? 250;
  const maxBatch = options.maxBatch ?? 200;
  const maxQueued = options.maxQueued ?? 50_000;
  const log = options.log.child({ component: 'usage-ledger' });
  let queue: NewLlmCallRow[] = [];
  let flushing: Promise<void> | undefined;
  let closed = false;
  /**
   * Rows ever queued, and how many of them have left the queue, written or
   * dropped: the queue is written in order, so a row is settled once this
   * count passes its number.
   */
  let queued = 0;
  let settled = 0;
  /** The number of each workflow's last row still queued. */
  const lastQueuedOf = new Map<string, number>();
  /** Runs waiting for their rows: resolved once `through` is settled, or a write failed. */
  let waiters: { through: number; resolve: () => void }[] = [];
  /** Takes `count` rows off the head of the queue, written or dropped. */
  function dequeue(count: number): void {
    queue = queue.slice(count);
    settled += count;
    for (const [workflowId, last] of lastQueuedOf) {
      if (last <= settled) lastQueuedOf.delete(workflowId);
    }
    const waiting = waiters;
    waiters = waiting.filter((waiter) => waiter.through > settled);
    for (const waiter of waiting) if (waiter.through <= settled) waiter.resolve();
  }
  /** A write failed: the runs waiting go on (their rows stay queued and are retried). */
  function releaseWaiters(): void {
    const waiting = waiters;
    waiters = [];
    for (const waiter of waiting) waiter.resolve();
  }
  const timer = setInterval(() => void flush(), flushIntervalMs);
  timer.unref();

  async function flush(): Promise<void> {
    if (flushing) return flushing;
    flushing = (async () => {
      while (queue.length > 0) {
        const batch = queue.slice(0, maxBatch);
        try {
          await llmCallsRepository(options.db).insertMany(batch);
          dequeue(batch.length);
        } catch (error) {
          if (isValueRefused(error) && (await writeEachDroppingRefused(batch))) continue;
          log.error(
            { err: error, queued: queue.length },
            'writing the usage ledger failed; will retry',
          );
          releaseWaiters();
          return;
        }
      }
    })().finally(() => {
      flushing = undefined;
    });
    return flushing;
  }

  /**
   * A row PostgreSQL refuses would hold back every row queued after it,
   * retried forever: the batch's rows are written one by one, and a refused
   * one is dropped with an error in the log. False when a write fails
   * otherwise (the database is gone): what is left stays queued.
   */
  async function writeEachDroppingRefused(batch: NewLlmCallRow[]): Promise<boolean> {
    for (const row of batch) {
      try {
        await llmCallsRepository(options.db).insertMany([row]);
      } catch (error) {
        if (!isValueRefused(error)) return false;
        log.error(
          { err: error, model: row.model, tenantId: row.tenant_id },
          'the database refused a usage ledger row; dropped it',
        );
      }
      dequeue(1);
    }
    return true;
  }

  return {
    record(attempt: AttemptRecord): void {
      if (closed) {
        log.warn(
          { model: attempt.model },
          'usage recorded after the ledger closed; flushing it now',
        );
      }
      const row = toRow(attempt);
      queue.push(row);
      queued += 1;
      if (row.workflow_id) lastQueuedOf.set(row.workflow_id, queued);
      if (queue.length > maxQueued) {
        const dropped = queue.length - maxQueued;
        dequeue(dropped);
        log.error({ dropped }, 'usage ledger queue full; dropped the oldest rows');
      }
      if (queue.length >= maxBatch || closed) void flush();
    },
    /** Writes everything queued so far. */
    flush,
    /**
     * Undefined when none of the workflow's rows is queued; else writes
     * them now, resolving once they are written, or once a write failed
     * (the caller goes on as it would have; they are retried). Never rejects.
     */
    writtenFirst(workflowId: string): Promise<void> | undefined {
      const through = lastQueuedOf.get(workflowId);
      if (through === undefined) return undefined;
      const written = new Promise<void>((resolve) => waiters.push({ through, resolve }));
      void flush();
      return written;
    },
    /** Stops the timer and writes what is left. */
    async close(): Promise<void> {
      closed = true;
      clearInterval(timer);
      await flush();
      if (queue.length > 0) await flush();
    },
    pending: (): number => queue.length,
  };
}

export type UsageLedger = ReturnType<typeof createUsageLedger>;

function toRow(attempt: AttemptRecord): NewLlmCallRow {
  return {
    tenant_id: attempt.context.tenantId,
    workflow_id: attempt.context.workflowId ?? null,
    provider: attempt.provider,
    model: attempt.model,
    model_id: attempt.modelId,
    attempt: attempt.attempt,
    input_tokens: attempt.usage.inputTokens,
    output_tokens: attempt.usage.outputTokens,
    cached_input_tokens: attempt.usage.cachedInputTokens,
    cache_write_tokens: attempt.usage.cacheWriteTokens,
    cost_usd: attempt.costUsd,
    latency_ms: Math.round(attempt.latencyMs),
    ttft_ms: attempt.ttftMs === null ? null : Math.round(attempt.ttftMs),
    outcome: attempt.outcome,
    started_at: attempt.startedAt,
  };
}
