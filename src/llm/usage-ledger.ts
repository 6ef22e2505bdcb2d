import type { Logger } from 'pino';
import { type Db, isValueRefused } from '../store/database.js';
import { llmCallsRepository } from '../store/llm-calls.js';
import type { NewLlmCallRow } from '../store/schema.js';
import type { AttemptRecord } from './router/types.js';

/**
 * Records every model call attempt in Postgres. `record` only queues, so a
 * model call never waits for the ledger. A workflow's rows are written by
 * its run, in the run's next statement, with the events that count their
 * usage (`rowsOf`): one commit for both, no round trip of their own, and a
 * process that dies (a SIGKILL, a crash) loses both or neither, so the
 * workflow never counts a call the ledger lacks. The rows of a workflow
 * whose run is here are left to it until it releases them. What no run
 * takes (calls without a workflow, what a run left when it released them,
 * rows given back) a background flush writes in batches (one INSERT per
 * batch) every `flushIntervalMs` or at `maxBatch` rows, and `close`, every
 * row, at shutdown. A
 * failed write is retried on the next flush (rows stay queued, up to
 * `maxQueued`, beyond which the oldest are dropped and counted in the log
 * rather than growing memory forever).
 */
export interface UsageLedgerOptions {
  db: Db;
  log: Logger;
  flushIntervalMs?: number;
  maxBatch?: number;
  maxQueued?: number;
}

/** A workflow's rows for its run's statements to write (UsageLedger's `rowsOf`). */
export interface WorkflowUsageRows {
  /**
   * Settles once a flush writing some of the workflow's rows has ended;
   * undefined when none is: a statement waits for it, for the events it
   * commits never to count a call whose row a crash could still lose.
   */
  flushing(): Promise<void> | undefined;
  /** Takes the workflow's queued rows off the queue, for one statement to write. */
  take(): NewLlmCallRow[];
  /** Rows taken for a statement that failed: queued again, for the flush to write. */
  giveBack(rows: NewLlmCallRow[]): void;
  /**
   * The run is over: the flush writes the workflow's rows from now on
   * (those of its calls after its last statement). Once; later calls do nothing.
   */
  release(): void;
}

export function createUsageLedger(options: UsageLedgerOptions) {
  const flushIntervalMs = options.flushIntervalMs ?? 250;
  const maxBatch = options.maxBatch ?? 200;
  const maxQueued = options.maxQueued ?? 50_000;
  const log = options.log.child({ component: 'usage-ledger' });
  let queue: NewLlmCallRow[] = [];
  let flushing: Promise<void> | undefined;
  /** The batch a flush is writing, off the queue meanwhile, and when its write ends. */
  let writing: { rows: NewLlmCallRow[]; ended: Promise<void> } | undefined;
  let closed = false;
  /** How many runs here write each workflow's rows (rowsOf, until released): the flush leaves those. */
  const runs = new Map<string, number>();
  const timer = setInterval(() => void flush(), flushIntervalMs);
  timer.unref();

  async function flush(): Promise<void> {
    if (flushing) return flushing;
    flushing = (async () => {
      for (;;) {
        const batch = nextBatch();
        if (batch.length === 0) return;
        const written = writeBatch(batch);
        writing = { rows: batch, ended: written.then(() => undefined) };
        const unwritten = await written;
        writing = undefined;
        if (unwritten.length > 0) {
          queue.unshift(...unwritten);
          return;
        }
      }
    })().finally(() => {
      flushing = undefined;
    });
    return flushing;
  }

  /** Takes the next batch off the queue: up to maxBatch rows no run here writes (all, once closed). */
  function nextBatch(): NewLlmCallRow[] {
    if (closed || runs.size === 0) return queue.splice(0, maxBatch);
    const batch: NewLlmCallRow[] = [];
    const kept: NewLlmCallRow[] = [];
    for (const row of queue) {
      const run = row.workflow_id != null && runs.has(row.workflow_id);
      (run || batch.length >= maxBatch ? kept : batch).push(row);
    }
    queue = kept;
    return batch;
  }

  /** Writes the batch; resolves with the rows left unwritten (the write failed), never rejects. */
  async function writeBatch(batch: NewLlmCallRow[]): Promise<NewLlmCallRow[]> {
    try {
      await llmCallsRepository(options.db).insertMany(batch);
      return [];
    } catch (error) {
      const unwritten = isValueRefused(error) ? await writeEachDroppingRefused(batch) : batch;
      if (unwritten.length > 0) {
        log.error(
          { err: error, queued: queue.length + unwritten.length },
          'writing the usage ledger failed; will retry',
        );
      }
      return unwritten;
    }
  }

  /**
   * A row PostgreSQL refuses would hold back every row queued after it,
   * retried forever: the batch's rows are written one by one, and a refused
   * one is dropped with an error in the log. When a write fails otherwise
   * (the database is gone), the rows from it on are left unwritten.
   */
  async function writeEachDroppingRefused(batch: NewLlmCallRow[]): Promise<NewLlmCallRow[]> {
    for (const [index, row] of batch.entries()) {
      try {
        await llmCallsRepository(options.db).insertMany([row]);
      } catch (error) {
        if (!isValueRefused(error)) return batch.slice(index);
        log.error(
          { err: error, model: row.model, tenantId: row.tenant_id },
          'the database refused a usage ledger row; dropped it',
        );
      }
    }
    return [];
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
        queue.splice(0, dropped);
        log.error({ dropped }, 'usage ledger queue full; dropped the oldest rows');
      }
      if (queue.length >= maxBatch || closed) void flush();
    },
    /** Writes everything queued so far. */
    flush,
    rowsOf(workflowId: string): WorkflowUsageRows {
      const isOwn = (row: NewLlmCallRow) => row.workflow_id === workflowId;
      runs.set(workflowId, (runs.get(workflowId) ?? 0) + 1);
      let released = false;
      return {
        flushing: () => {
          const batch = writing;
          return batch?.rows.some(isOwn) ? batch.ended : undefined;
        },
        take() {
          if (!queue.some(isOwn)) return [];
          const taken = queue.filter(isOwn);
          queue = queue.filter((row) => !isOwn(row));
          return taken;
        },
        giveBack(rows) {
          queue.unshift(...rows);
        },
        release() {
          if (released) return;
          released = true;
          const left = (runs.get(workflowId) ?? 1) - 1;
          if (left > 0) runs.set(workflowId, left);
          else runs.delete(workflowId);
        },
      };
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
    // As the provider named it: a NUL, which no text column holds, would
    // refuse the statement of the run that writes the row.
    model_id: attempt.modelId.replaceAll('\u0000', ''),
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
