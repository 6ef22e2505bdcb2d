import type { NewLlmCallRow } from '../store/schema.js';
import type { NewEventRow, TokensAmongEvents, TurnRow } from '../store/workflow-events.js';
import type { WorkflowEvent } from '../workflows/types.js';

/**
 * The order in which a workflow tracker's writes reach PostgreSQL, and
 * which of them share a statement. Everything the tracker is told goes in
 * one queue, written by one writer at a time, so events keep the order they
 * were reported in:
 *
 * - what a caller waits for (an awaited event, a turn, a transition) is
 *   written on the next turn of the event loop, with everything queued
 *   before it in the same statement;
 * - progress nobody waits for (`llm_call`, `tool_call`) waits up to
 *   `progressFlushMs` for such a statement to go with, so a turn's events,
 *   its row and (after the last turn) the workflow's end are one statement;
 * - token text goes in the NOTIFY of the statement whose events surround
 *   it, at its place among them; alone, or too long for a NOTIFY, it is
 *   published by itself, in order;
 * - a deferrable statement (a run's start) waits like progress, and takes
 *   what is queued after it, up to the first thing a caller waits for, into
 *   its statement after its own events: a run's start and its first turn
 *   are one statement.
 */

export interface Waiter<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** What a transition's statement (or a `record`'s) writes besides its own events. */
export interface Merged {
  /** Queued before the statement: written ahead of its own events. */
  events: NewEventRow[];
  writes: TurnRow[];
  /** The usage ledger's rows of the workflow's calls (UnitWriterOptions' `ledgerRows`). */
  usageRows: NewLlmCallRow[];
  tokens: TokensAmongEvents | undefined;
  /** Queued after a deferrable statement: written after its own events. */
  eventsAfter: NewEventRow[];
}

export type Queued =
  | { kind: 'event'; row: NewEventRow; waiter: Waiter<WorkflowEvent> | undefined }
  | { kind: 'write'; write: TurnRow; waiter: Waiter<void> | undefined }
  | { kind: 'tokens'; text: string; waiter: Waiter<void> | undefined }
  | {
      kind: 'statement';
      run: (merged: Merged) => Promise<WorkflowEvent[]>;
      waiter: Waiter<WorkflowEvent[]>;
      /** Waits like progress and takes what follows it (see above). */
      deferrable: boolean;
    };

export type Batched = Extract<Queued, { kind: 'event' | 'write' }>;
type TokensItem = Extract<Queued, { kind: 'tokens' }>;
type StatementItem = Extract<Queued, { kind: 'statement' }>;

/**
 * One statement's worth of the queue, in order: events and writes, at most
 * one token text among them, then a statement or none, then (after a
 * deferrable statement) the events and writes that followed it.
 */
export interface Unit {
  items: Batched[];
  tokens: (TokensItem & { afterEvents: number }) | undefined;
  statement: StatementItem | undefined;
  after: Batched[];
}

export interface WriteQueueOptions {
  /** Writes one unit; never rejects (failures go to the items' waiters). */
  write(unit: Unit): Promise<void>;
  /** Whether a token text fits in a statement's NOTIFY. */
  fitsInline(text: string): boolean;
  /** How long progress nobody waits for may wait for a statement to go with. */
  progressFlushMs: number;
}

export function createWriteQueue(options: WriteQueueOptions) {
  const queue: Queued[] = [];
  let writing: Promise<void> | undefined;
  let immediate: NodeJS.Immediate | undefined;
  let progressTimer: NodeJS.Timeout | undefined;

  function urgent(item: Queued): boolean {
    if (item.kind === 'statement') return !item.deferrable;
    return item.kind === 'tokens' || item.waiter !== undefined;
  }

  function schedule(): void {
    if (writing || immediate) return;
    if (queue.some(urgent)) {
      clearTimeout(progressTimer);
      progressTimer = undefined;
      immediate = setImmediate(() => start(false));
    } else if (queue.length > 0) {
      progressTimer ??= setTimeout(() => start(true), options.progressFlushMs);
    }
  }

  function start(everything: boolean): void {
    clearImmediate(immediate);
    clearTimeout(progressTimer);
    immediate = undefined;
    progressTimer = undefined;
    if (writing) return;
    writing = writeQueued(everything).finally(() => {
      writing = undefined;
      schedule();
    });
  }

  async function writeQueued(everything: boolean): Promise<void> {
    while (queue.length > 0 && (everything || queue.some(urgent))) {
      await options.write(takeUnit());
    }
  }

  /** The next unit from the head of the queue: up to its first statement, with at most one token text. */
  function takeUnit(): Unit {
    const unit: Unit = { items: [], tokens: undefined, statement: undefined, after: [] };
    let events = 0;
    let taken = 0;
    for (const item of queue) {
      if (item.kind === 'statement') {
        unit.statement = item;
        taken += 1;
        if (item.deferrable) taken += takeAfter(unit, taken);
        break;
      }
      if (item.kind === 'tokens') {
        // A second text, or one too long to go inline, starts the next unit.
        if (unit.tokens) break;
        if (!options.fitsInline(item.text)) {
          if (taken === 0) {
            unit.tokens = { ...item, afterEvents: 0 };
            taken = 1;
          }
          break;
        }
        unit.tokens = { ...item, afterEvents: events };
      } else {
        unit.items.push(item);
        if (item.kind === 'event') events += 1;
      }
      taken += 1;
    }
    queue.splice(0, taken);
    return unit;
  }

  /** What follows a deferrable statement at `from`: events and writes, up to the first one a caller waits for. */
  function takeAfter(unit: Unit, from: number): number {
    let taken = 0;
    for (const item of queue.slice(from)) {
      if (item.kind === 'statement' || item.kind === 'tokens') break;
      unit.after.push(item);
      taken += 1;
      if (item.waiter) break;
    }
    return taken;
  }

  return {
    push(item: Queued): void {
      queue.push(item);
      schedule();
    },

    /** Writes everything queued, waiting for none of it to wait longer. */
    async drain(): Promise<void> {
      for (;;) {
        if (!writing && queue.length > 0) start(true);
        if (!writing) return;
        await writing;
      }
    },
  };
}

export type WriteQueue = ReturnType<typeof createWriteQueue>;

export function eventsOf(items: Batched[]): NewEventRow[] {
  return items.flatMap((item) => (item.kind === 'event' ? [item.row] : []));
}

export function writesOf(items: Batched[]): TurnRow[] {
  return items.flatMap((item) => (item.kind === 'write' ? [item.write] : []));
}
