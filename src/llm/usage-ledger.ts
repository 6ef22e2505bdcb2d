import type { Logger } from 'pino';
import { type Db, isValueRefused } from '../store/database.js';
import { llmCallsRepository } from '../store/llm-calls.js';
import type { NewLlmCallRow } from '../store/schema.js';
import type { AttemptRecord } from './router/types.js';

/**
 * Records every model call attempt in Postgres. `record` only queues, so a
 * turn never waits for the ledger; a background flush writes batches (one
 * INSERT per batch) every `flushIntervalMs` or at `maxBatch` rows, and
 * `close` writes what is left at shutdown. A failed write is retried on the
 * next flush (rows stay queued, up to `maxQueued`, beyond which the oldest
 * are dropped and counted in the log rather than growing memory forever).
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
  const timer = setInterval(() => void flush(), flushIntervalMs);
  timer.unref();

  async function flush(): Promise<void> {
    if (flushing) return flushing;
    flushing = (async () => {
      while (queue.length > 0) {
        const batch = queue.slice(0, maxBatch);
        try {
          await llmCallsRepository(options.db).insertMany(batch);
          queue = queue.slice(batch.length);
        } catch (error) {
          if (isValueRefused(error) && (await writeEachDroppingRefused(batch))) continue;
          log.error(
            { err: error, queued: queue.length },
            'writing the usage ledger failed; will retry',
          );
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
      queue = queue.slice(1);
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
      queue.push(toRow(attempt));
      if (queue.length > maxQueued) {
        const dropped = queue.length - maxQueued;
        queue = queue.slice(dropped);
        log.error({ dropped }, 'usage ledger queue full; dropped the oldest rows');
      }
      if (queue.length >= maxBatch || closed) void flush();
    },
    /** Writes everything queued so far. */
    flush,
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
