import type { Transaction } from 'kysely';
import { withoutNul } from '../json-limits.js';
import { inTransaction } from '../store/database.js';
import type { Database } from '../store/schema.js';
import {
  type NewEventRow,
  type TurnRow,
  workflowEventsRepository,
} from '../store/workflow-events.js';
import { toEvent } from '../workflows/rows.js';
import type { TransitionBatches } from '../workflows/transition-batches.js';
import {
  type Returning,
  type TransitionInput,
  type TransitionResultOf,
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
import { createUnitWriter, type UnitWriterOptions } from './unit-writer.js';
import { createWriteQueue, type Merged, type Queued, type Waiter } from './write-queue.js';

export interface TrackerOptions extends UnitWriterOptions {
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
  /**
   * How long progress nobody waits for (`enqueue`) may wait for a
   * statement to go with (write-queue.ts); 20 ms when unset.
   */
  progressFlushMs?: number;
  /** Where the transitions go to share statements with other workflows'; each alone when unset. */
  transitionBatches?: TransitionBatches;
}

/** A tracker's options, with what its transitions return (TransitionInput's `returning`). */
export type TrackerOptionsFor<R extends Returning> = TrackerOptions & {
  /** `seq` for a run's own tracker, which needs no workflow back; `workflow` when unset. */
  returning?: R;
};

export type Transition = Omit<TransitionInput, 'tenantId' | 'workflowId' | 'origin' | 'returning'>;

/**
 * The WorkflowTracker of one workflow run: the orchestrator reports every
 * step through it. Persisted events get the workflow's next seq and reach
 * subscribers on every replica; token chunks reach live subscribers only
 * (the `answer` event carries the whole text for replays).
 *
 * Every write goes through one queue (write-queue.ts), so events keep the
 * order they were reported in, and what is reported together is written
 * together: bench/simple-path counted 10 statements for the start, events
 * and turns of a two-turn workflow, one per event, turn, start and end;
 * through the queue they are 2, one per turn (the start with the first,
 * the end with the last). `emit`, `persist` and the transitions resolve
 * once committed; `enqueue` does not wait, and a failure to write what it
 * queued is thrown by the next call that waits.
 */
export function createWorkflowTracker<R extends Returning = 'workflow'>(
  options: TrackerOptionsFor<R>,
) {
  const { db, tenantId, workflowId } = options;
  const tokenFlushMs = options.tokenFlushMs ?? 50;
  let pendingTokens = '';
  let tokenTimer: NodeJS.Timeout | undefined;
  const writer = createUnitWriter(options);
  const queue = createWriteQueue({
    write: writer.write,
    fitsInline: writer.fitsInline,
    progressFlushMs: options.progressFlushMs ?? 20,
  });

  function push(item: Queued): void {
    // Tokens streamed before this item reach readers before it.
    if (item.kind !== 'tokens') queueTokens(undefined);
    queue.push(item);
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

  function waitFor<T>(item: (waiter: Waiter<T>) => Queued): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      writer.throwUnreported();
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
      return inTransaction(db, async (tx) => {
        await alsoInTransaction(tx);
        const { rows } = await workflowEventsRepository(tx).appendNotified({
          workflowId,
          tenantId,
          events: [...merged.events, event, ...merged.eventsAfter],
          writes: merged.writes,
          usageRows: merged.usageRows,
          tokens: merged.tokens,
          origin: options.origin,
          ...(options.heldBy ? { heldBy: options.heldBy } : {}),
        });
        return rows.map(toEvent);
      });
    }).then((own) => own[0] as WorkflowEvent);
  }

  /** Resolves with the statement's own events (not those it took along). */
  function runStatement(run: (merged: Merged) => Promise<WorkflowEvent[]>, deferrable = false) {
    return waitFor<WorkflowEvent[]>((waiter) => ({ kind: 'statement', run, waiter, deferrable }));
  }

  /**
   * A status change with its events, in one statement (see
   * transitionWorkflow), with what was queued before it.
   */
  async function transition(
    change: Transition,
    /** See write-queue.ts: a run's start waits for its first turn's statement. */
    deferrable = false,
  ): Promise<TransitionResultOf<R>> {
    let done: Omit<TransitionResultOf<R>, 'events'> | undefined;
    const committed = await runStatement(async (merged) => {
      const input: TransitionInput = {
        ...change,
        events: [...merged.events, ...change.events, ...merged.eventsAfter],
        turnRows: merged.writes,
        usageRows: merged.usageRows,
        tokens: merged.tokens,
        tenantId,
        workflowId,
        origin: options.origin,
        ...(options.heldBy ? { heldBy: options.heldBy } : {}),
        returning: options.returning ?? 'workflow',
      };
      // With `returning` as R says: the result is the one for R.
      const result = (await transitionWorkflow(
        db,
        input,
        options.transitionBatches,
      )) as TransitionResultOf<R>;
      const { events, ...rest } = result;
      done = rest;
      return events;
    }, deferrable);
    if (!done) throw new Error('a transition committed without its workflow');
    return { ...done, events: committed } as TransitionResultOf<R>;
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
    persist(write: TurnRow): Promise<void> {
      return waitFor<void>((waiter) => ({ kind: 'write', write, waiter }));
    },

    /**
     * Queues a row to go with the next statement without waiting: the
     * answering turn, written with the workflow's end.
     */
    enqueueWrite(write: TurnRow): void {
      push({ kind: 'write', write, waiter: undefined });
    },

    /** A chunk of streamed answer text, coalesced and delivered live only. */
    token(text: string): void {
      // It travels as a text parameter, which PostgreSQL refuses with a NUL.
      pendingTokens += withoutNul(text);
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
      queueTokens(undefined);
      await queue.drain();
      writer.forgetUnreported();
    },

    transition,

    /** queued -> running, with the `workflow_start` event. */
    begin(
      detail: Record<string, unknown> = {},
      /** Decided already (a classification needing no model): written with the start. */
      decided?: { kind: WorkflowKind; events: NewEventRow[] },
      /**
       * `deferred`: written with what the run reports next, up to the first
       * thing it waits for (its first turn), in one statement; meanwhile the
       * run goes on without waiting for it (write-queue.ts).
       */
      options: { deferred?: boolean } = {},
    ): Promise<TransitionResultOf<R>> {
      return transition(
        {
          to: 'running',
          // Undone by a PostgreSQL crash, the start only happens again.
          durable: false,
          ...(decided ? { kind: decided.kind } : {}),
          events: [
            { type: 'workflow_start', step: null, status: 'started', detail, elapsedMs: null },
            ...(decided?.events ?? []),
          ],
        },
        options.deferred === true,
      );
    },

    /**
     * The final transition, with the `workflow_end` event; nothing is
     * emitted after it. `alsoInStatement` writes commit with it.
     */
    end(
      outcome: /** `reason`: why it ended (a budget cap, say); `answered` when omitted. */
        | { status: 'completed'; answer: string; reason?: CompletionReason }
        | { status: 'failed'; error: { code: string; message: string } }
        /** `error`: a code that says why, on the workflow and in its `workflow_end` (an expired pause's). */
        | { status: 'cancelled'; reason?: string; error?: { code: string; message: string } },
      options: {
        elapsedMs?: number;
        /** Events that precede `workflow_end` in the same transaction (the answer, the usage). */
        events?: NewEventRow[];
        /** The run's usage, added to the workflow's totals with the end. */
        usage?: Transition['usage'];
        /** Writes in the end's own statement (a session's new messages), and what they return. */
        alsoInStatement?: Transition['alsoInStatement'];
        alsoSelect?: Transition['alsoSelect'];
        /** Events found under the row lock, before the others (TransitionInput's `eventsUnderLock`). */
        eventsUnderLock?: Transition['eventsUnderLock'];
        /** Count what no run counted (TransitionInput's `countUncountedUsage`): an end from outside. */
        countUncountedUsage?: boolean;
        /** Conditions checked under the row lock (TransitionInput's): an end only of the workflow as seen. */
        only?: Pick<Transition, 'expectedVersion' | 'fromAwaiting' | 'skipLocked'>;
      } = {},
    ): Promise<TransitionResultOf<R>> {
      const result: WorkflowResult | undefined =
        outcome.status === 'completed'
          ? { answer: outcome.answer, reason: outcome.reason ?? 'answered' }
          : undefined;
      const error = outcome.status === 'completed' ? undefined : outcome.error;
      const detail =
        outcome.status === 'failed'
          ? { error: outcome.error }
          : outcome.status === 'cancelled'
            ? { reason: outcome.reason ?? 'cancelled', ...(error ? { error } : {}) }
            : { reason: result?.reason };
      return transition({
        to: outcome.status,
        ...(result ? { result } : {}),
        ...(error ? { error } : {}),
        ...options.only,
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
        alsoInStatement: options.alsoInStatement,
        alsoSelect: options.alsoSelect,
        eventsUnderLock: options.eventsUnderLock,
        ...(options.countUncountedUsage ? { countUncountedUsage: true } : {}),
      });
    },

    /**
     * The run is over: drops unsent token chunks' timer, and leaves the
     * usage ledger's rows of calls it did not write to the ledger's flush.
     */
    close(): void {
      clearTimeout(tokenTimer);
      tokenTimer = undefined;
      options.ledgerRows?.release();
    },
  };
}

export type WorkflowTracker<R extends Returning = 'workflow'> = ReturnType<
  typeof createWorkflowTracker<R>
>;
