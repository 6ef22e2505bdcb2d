import type { Transaction } from 'kysely';
import type { Logger } from 'pino';
import { AppError } from '../errors.js';
import type { Db } from '../store/database.js';
import type { Database } from '../store/schema.js';
import {
  type NewEventRow,
  namedWrites,
  type StatementWrite,
  workflowEventsRepository,
} from '../store/workflow-events.js';
import { toEvent } from '../workflows/rows.js';
import {
  type TransitionInput,
  type TransitionResult,
  transitionWorkflow,
} from '../workflows/transitions.js';
import type {
  CompletionReason,
  EventStatus,
  EventType,
  WorkflowEvent,
  WorkflowKind,
  WorkflowResult,
} from '../workflows/types.js';
import type { EventHub } from './event-hub.js';

export interface TrackerOptions {
  db: Db;
  hub: EventHub;
  tenantId: string;
  workflowId: string;
  origin: string;
  log: Logger;
  /**
   * Token chunks are coalesced for this long before they are published.
   * Every NOTIFY is a commit behind one cluster-wide lock; at 50 ms a
   * streaming workflow costs at most 20 NOTIFYs a second however fast the
   * model writes, while a reader still sees text appear smoothly. Measured
   * (bench/notify-cost, 2026-11-30, 2 cores, embedded PostgreSQL 18, five
   * runs on a shared machine): beside 8 clients appending events with a
   * NOTIFY each (1,013-1,852 tx/s), 32 workflows streaming 80 five-byte
   * tokens/s with a NOTIFY per token (2,560/s) cut those appends by 26-62%
   * and raised their p99 1.5-3x; coalesced per 50 ms (~530 NOTIFYs/s)
   * they cost 0-14%.
   */
  tokenFlushMs?: number;
}

export type Transition = Omit<TransitionInput, 'tenantId' | 'workflowId' | 'origin'>;

interface Waiter<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** What the statement of a transition (or of a `record`) writes besides its own events. */
interface Merged {
  events: NewEventRow[];
  writes: StatementWrite[];
}

/**
 * The tracker's queue, written in order by one writer at a time. Events
 * and writes queued one after the other go in one statement; token text
 * is published once everything queued before it is committed; a
 * transition takes what is queued before it into its own statement.
 */
type Queued =
  | { kind: 'event'; row: NewEventRow; waiter: Waiter<WorkflowEvent> | undefined }
  | { kind: 'write'; write: StatementWrite; waiter: Waiter<void> | undefined }
  | { kind: 'tokens'; text: string; waiter: Waiter<void> | undefined }
  | {
      kind: 'statement';
      run: (merged: Merged) => Promise<WorkflowEvent[]>;
      waiter: Waiter<WorkflowEvent[]>;
    };

/**
 * The WorkflowTracker of one workflow run: the orchestrator reports every
 * step through it. Persisted events get the workflow's next seq and reach
 * subscribers on every replica; token chunks reach live subscribers only
 * (the `answer` event carries the whole text for replays).
 *
 * Every write goes through one queue, so events keep the order they were
 * reported in, and what is reported back to back is written together:
 * bench/simple-path counted 9 statements for the events and turns of a
 * two-turn workflow, one per event, turn and end; batched, a turn's
 * events, its row and (for the last turn) the workflow's end are 4, two
 * of them written while the model is called. `emit`, `persist` and the
 * transitions resolve once committed; `enqueue` does not wait, and a
 * failure to write what it queued is thrown by the next call that waits.
 */
export function createWorkflowTracker(options: TrackerOptions) {
  const { db, hub, tenantId, workflowId } = options;
  const tokenFlushMs = options.tokenFlushMs ?? 50;
  const events = workflowEventsRepository(db);
  let pendingTokens = '';
  let tokenTimer: NodeJS.Timeout | undefined;
  const queue: Queued[] = [];
  let writing: Promise<void> | undefined;
  let scheduled: NodeJS.Immediate | undefined;
  /** The failure of a batch nobody waited for, until a caller that waits is told. */
  let unreported: { error: unknown } | undefined;

  function push(item: Queued): void {
    // Tokens streamed before this item reach readers before it.
    if (item.kind !== 'tokens') queueTokens(undefined);
    queue.push(item);
    // On the next turn of the event loop, so that what is reported back to back goes together.
    if (!writing && !scheduled) scheduled = setImmediate(startWriting);
  }

  function startWriting(): void {
    scheduled = undefined;
    if (writing || queue.length === 0) return;
    writing = writeQueued().finally(() => {
      writing = undefined;
      if (queue.length > 0 && !scheduled) scheduled = setImmediate(startWriting);
    });
  }

  async function writeQueued(): Promise<void> {
    while (queue.length > 0) {
      const boundary = queue.findIndex(
        (item) => item.kind === 'tokens' || item.kind === 'statement',
      );
      const batch = queue.splice(0, boundary === -1 ? queue.length : boundary + 1);
      const last = batch.at(-1);
      if (last?.kind === 'tokens' || last?.kind === 'statement') batch.pop();
      const merged = batch as Batched[];
      if (last?.kind === 'statement') {
        await writeStatement(last, merged);
        continue;
      }
      if (merged.length > 0) await writeBatch(merged);
      if (last?.kind === 'tokens') await publishTokens(last);
    }
  }

  async function writeBatch(batch: Batched[]) {
    try {
      const { rows } = await events.appendNotified({
        workflowId,
        tenantId,
        events: eventsOf(batch),
        writes: writesOf(batch),
        origin: options.origin,
        fastCommit: true,
      });
      const committed = rows.map(toEvent);
      hub.publish(committed);
      settle(batch, committed);
    } catch (error) {
      for (const item of batch) item.waiter?.reject(error);
      if (batch.some((item) => !item.waiter)) {
        unreported ??= { error };
        // Refused because the workflow ended meanwhile (a cancel): expected, and said by its end.
        const ended = error instanceof AppError && error.code === 'workflow_finished';
        options.log[ended ? 'debug' : 'warn'](
          { err: error, workflowId },
          'writing queued events failed',
        );
      }
    }
  }

  async function writeStatement(
    statement: Extract<Queued, { kind: 'statement' }>,
    merged: Batched[],
  ): Promise<void> {
    try {
      const committed = await statement.run({
        events: eventsOf(merged),
        writes: writesOf(merged),
      });
      hub.publish(committed);
      settle(merged, committed);
      statement.waiter.resolve(committed.slice(eventsOf(merged).length));
    } catch (error) {
      // The statement's caller is told; what it took along is lost with it.
      for (const item of merged) item.waiter?.reject(error);
      statement.waiter.reject(error);
    }
  }

  async function publishTokens(item: Extract<Queued, { kind: 'tokens' }>): Promise<void> {
    try {
      await hub.publishTokens(workflowId, item.text);
    } catch (error) {
      options.log.warn({ err: error, workflowId }, 'publishing token chunks failed');
    }
    item.waiter?.resolve();
  }

  /** Resolves the waiters of a written batch with their events (the batch's come first in `committed`). */
  function settle(batch: Batched[], committed: WorkflowEvent[]): void {
    const ownEvents = committed.slice(0, eventsOf(batch).length);
    let index = 0;
    for (const item of batch) {
      if (item.kind === 'event') item.waiter?.resolve(ownEvents[index++] as WorkflowEvent);
      else item.waiter?.resolve();
    }
  }

  function queueTokens(waiter: Waiter<void> | undefined): void {
    clearTimeout(tokenTimer);
    tokenTimer = undefined;
    if (pendingTokens === '') {
      waiter?.resolve();
      return;
    }
    const text = pendingTokens;
    pendingTokens = '';
    push({ kind: 'tokens', text, waiter });
  }

  /** Throws the failure of a batch nobody waited for, once. */
  function throwUnreported(): void {
    const failure = unreported;
    unreported = undefined;
    if (failure) throw failure.error;
  }

  function waitFor<T>(item: (waiter: Waiter<T>) => Queued): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      throwUnreported();
      push(item({ resolve, reject }));
    });
  }

  function emit(
    type: EventType,
    step: string | null,
    status: EventStatus,
    detail: Record<string, unknown> = {},
    elapsedMs?: number,
  ): Promise<WorkflowEvent> {
    const row = { type, step, status, detail, elapsedMs: elapsedMs ?? null };
    return waitFor<WorkflowEvent>((waiter) => ({ kind: 'event', row, waiter }));
  }

  /**
   * Appends one event with other writes in one durable transaction
   * (`alsoInTransaction`: the kind a classification decides, on the
   * workflow row), after what is queued, which it takes along.
   */
  function record(
    event: NewEventRow,
    alsoInTransaction: (tx: Transaction<Database>) => Promise<void>,
  ): Promise<WorkflowEvent> {
    return runStatement(async (merged) => {
      return db.transaction().execute(async (tx) => {
        await alsoInTransaction(tx);
        const { rows } = await workflowEventsRepository(tx).appendNotified({
          workflowId,
          tenantId,
          events: [...merged.events, event],
          writes: merged.writes,
          origin: options.origin,
        });
        return rows.map(toEvent);
      });
    }).then((committed) => committed.at(-1) as WorkflowEvent);
  }

  function runStatement(run: (merged: Merged) => Promise<WorkflowEvent[]>) {
    return waitFor<WorkflowEvent[]>((waiter) => ({ kind: 'statement', run, waiter }));
  }

  /**
   * A status change with its events, in one statement (see
   * transitionWorkflow), with what was queued before it.
   */
  async function transition(change: Transition): Promise<TransitionResult> {
    let workflow: TransitionResult['workflow'] | undefined;
    const committed = await runStatement(async (merged) => {
      const result = await transitionWorkflow(db, {
        ...change,
        events: [...merged.events, ...change.events],
        alsoInStatement: [
          ...namedWrites(merged.writes, 'changed'),
          ...(change.alsoInStatement ?? []),
        ],
        tenantId,
        workflowId,
        origin: options.origin,
      });
      workflow = result.workflow;
      return result.events;
    });
    if (!workflow) throw new Error('a transition committed without its workflow');
    return { workflow, events: committed };
  }

  return {
    emit,
    record,

    /**
     * Queues an event without waiting for it to be written: progress
     * (`llm_call`, `tool_call`) goes out with the next batch. A failed
     * write is thrown by the next call that waits.
     */
    enqueue(
      type: EventType,
      step: string | null,
      status: EventStatus,
      detail: Record<string, unknown> = {},
      elapsedMs?: number,
    ): void {
      push({
        kind: 'event',
        row: { type, step, status, detail, elapsedMs: elapsedMs ?? null },
        waiter: undefined,
      });
    },

    /** Writes a row (a tool-loop turn) with the queued events; resolves once committed. */
    persist(write: StatementWrite): Promise<void> {
      return waitFor<void>((waiter) => ({ kind: 'write', write, waiter }));
    },

    /**
     * Queues a row to go with the next statement without waiting: the
     * answering turn, written with the workflow's end.
     */
    enqueueWrite(write: StatementWrite): void {
      push({ kind: 'write', write, waiter: undefined });
    },

    /** A chunk of streamed answer text, coalesced and delivered live only. */
    token(text: string): void {
      pendingTokens += text;
      tokenTimer ??= setTimeout(() => queueTokens(undefined), tokenFlushMs);
    },

    /** Publishes the token text streamed so far (after what was queued before it). */
    flushTokens(): Promise<void> {
      return new Promise<void>((resolve, reject) => queueTokens({ resolve, reject }));
    },

    /**
     * Resolves once everything queued is written or has failed (a stopped
     * run, before its lease is handed over). Failures are not thrown.
     */
    async drain(): Promise<void> {
      for (;;) {
        if (scheduled) {
          clearImmediate(scheduled);
          startWriting();
        }
        if (!writing) break;
        await writing;
      }
      unreported = undefined;
    },

    transition,

    /** queued -> running, with the `workflow_start` event. */
    begin(
      detail: Record<string, unknown> = {},
      /** Decided already (a classification needing no model): written with the start. */
      decided?: { kind: WorkflowKind; events: NewEventRow[] },
    ): Promise<TransitionResult> {
      return transition({
        to: 'running',
        // Undone by a PostgreSQL crash, the start only happens again.
        durable: false,
        ...(decided ? { kind: decided.kind } : {}),
        events: [
          { type: 'workflow_start', step: null, status: 'started', detail, elapsedMs: null },
          ...(decided?.events ?? []),
        ],
      });
    },

    /**
     * The final transition, with the `workflow_end` event; nothing is
     * emitted after it. `alsoInTransaction` writes commit with it.
     */
    end(
      outcome: /** `reason`: why it ended (a budget cap, say); `answered` when omitted. */
        | { status: 'completed'; answer: string; reason?: CompletionReason }
        | { status: 'failed'; error: { code: string; message: string } }
        | { status: 'cancelled'; reason?: string },
      options: {
        elapsedMs?: number;
        /** Events that precede `workflow_end` in the same transaction (the answer, the usage). */
        events?: NewEventRow[];
        /** The run's usage, added to the workflow's totals with the end. */
        usage?: Transition['usage'];
        alsoInTransaction?: Transition['alsoInTransaction'];
      } = {},
    ): Promise<TransitionResult> {
      const result: WorkflowResult | undefined =
        outcome.status === 'completed'
          ? { answer: outcome.answer, reason: outcome.reason ?? 'answered' }
          : undefined;
      const detail =
        outcome.status === 'failed'
          ? { error: outcome.error }
          : outcome.status === 'cancelled'
            ? { reason: outcome.reason ?? 'cancelled' }
            : { reason: result?.reason };
      return transition({
        to: outcome.status,
        ...(result ? { result } : {}),
        ...(outcome.status === 'failed' ? { error: outcome.error } : {}),
        events: [
          ...(options.events ?? []),
          {
            type: 'workflow_end',
            step: null,
            status: outcome.status,
            detail,
            elapsedMs: options.elapsedMs ?? null,
          },
        ],
        ...(options.usage ? { usage: options.usage } : {}),
        alsoInTransaction: options.alsoInTransaction,
      });
    },

    /** Drops unsent token chunks' timer (the run is over). */
    close(): void {
      clearTimeout(tokenTimer);
      tokenTimer = undefined;
    },
  };
}

export type WorkflowTracker = ReturnType<typeof createWorkflowTracker>;

type Batched = Exclude<Queued, { kind: 'tokens' | 'statement' }>;

function eventsOf(batch: Batched[]): NewEventRow[] {
  return batch.flatMap((item) => (item.kind === 'event' ? [item.row] : []));
}

function writesOf(batch: Batched[]): StatementWrite[] {
  return batch.flatMap((item) => (item.kind === 'write' ? [item.write] : []));
}
