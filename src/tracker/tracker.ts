import type { Logger } from 'pino';
import type { Db, DbOrTx } from '../store/database.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
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

/**
 * The WorkflowTracker of one workflow run: the orchestrator reports every
 * step through it. Persisted events get the workflow's next seq and reach
 * subscribers on every replica; token chunks reach live subscribers only
 * (the `answer` event carries the whole text for replays).
 */
export function createWorkflowTracker(options: TrackerOptions) {
  const { db, hub, tenantId, workflowId } = options;
  const tokenFlushMs = options.tokenFlushMs ?? 50;
  let pendingTokens = '';
  let flushTimer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();

  function flushTokens(): Promise<void> {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    if (pendingTokens === '') return flushing;
    const text = pendingTokens;
    pendingTokens = '';
    flushing = flushing
      .then(() => hub.publishTokens(workflowId, text))
      .catch((error: unknown) =>
        options.log.warn({ err: error, workflowId }, 'publishing token chunks failed'),
      );
    return flushing;
  }

  /**
   * Appends one event; `alsoInTransaction` writes commit or roll back
   * with it (the kind a classification decides, on the workflow row).
   */
  async function record(
    event: NewEventRow,
    alsoInTransaction?: Transition['alsoInTransaction'],
  ): Promise<WorkflowEvent> {
    // Tokens written before this event must reach readers before it.
    await flushTokens();
    const append = async (within: DbOrTx, fastCommit: boolean) => {
      const { rows } = await workflowEventsRepository(within).appendNotified({
        workflowId,
        tenantId,
        events: [event],
        origin: options.origin,
        fastCommit,
      });
      const [row] = rows;
      if (!row) throw new Error('appending an event returned no row');
      return toEvent(row);
    };
    // A lone event is one statement, committed without waiting for the WAL
    // flush (see appendNotified); one with other writes is a durable transaction.
    const committed = alsoInTransaction
      ? await db.transaction().execute(async (tx) => {
          await alsoInTransaction(tx);
          return append(tx, false);
        })
      : await append(db, true);
    hub.publish([committed]);
    return committed;
  }

  function emit(
    type: EventType,
    step: string | null,
    status: EventStatus,
    detail: Record<string, unknown> = {},
    elapsedMs?: number,
  ): Promise<WorkflowEvent> {
    return record({ type, step, status, detail, elapsedMs: elapsedMs ?? null });
  }

  /** A status change with its events, in one transaction (see transitionWorkflow). */
  async function transition(change: Transition): Promise<TransitionResult> {
    await flushTokens();
    const result = await transitionWorkflow(db, {
      ...change,
      tenantId,
      workflowId,
      origin: options.origin,
    });
    hub.publish(result.events);
    return result;
  }

  return {
    emit,
    record,

    /** Emits `started`, runs `work`, then `completed` or `failed`, both with `elapsedMs`. */
    async step<T>(
      type: EventType,
      step: string,
      detail: Record<string, unknown>,
      work: () => Promise<T>,
      completedDetail?: (result: T) => Record<string, unknown>,
    ): Promise<T> {
      await emit(type, step, 'started', detail);
      const started = performance.now();
      try {
        const result = await work();
        await emit(
          type,
          step,
          'completed',
          { ...detail, ...completedDetail?.(result) },
          performance.now() - started,
        );
        return result;
      } catch (error) {
        const failure =
          error instanceof Error
            ? { code: (error as { code?: string }).code, message: error.message }
            : {};
        await emit(
          type,
          step,
          'failed',
          { ...detail, error: failure },
          performance.now() - started,
        );
        throw error;
      }
    },

    /** A chunk of streamed answer text, coalesced and delivered live only. */
    token(text: string): void {
      pendingTokens += text;
      flushTimer ??= setTimeout(() => void flushTokens(), tokenFlushMs);
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

    flushTokens,

    /** Drops unsent token chunks' timer (the run is over). */
    close(): void {
      clearTimeout(flushTimer);
      flushTimer = undefined;
    },
  };
}

export type WorkflowTracker = ReturnType<typeof createWorkflowTracker>;
