import { performance } from 'node:perf_hooks';
import type { EventHub } from '../../src/tracker/event-hub.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import type { RoundTripCounter, StatementCount } from '../support/db-roundtrips.js';

/**
 * Where one stage's database cost begins and ends, seen from inside the
 * service: every event the service commits goes through `hub.publish`
 * right after its transaction committed (tracker.ts), before any
 * subscriber or SSE stream gets it. The bench wraps that method, so it
 * knows the moment each event committed, on the service's clock.
 *
 * A window of statements runs from one such moment to another; the round
 * trip counter (bench/support/db-roundtrips.ts, which wraps
 * `pg.Client.prototype.query`) is reset when a window opens and read when
 * it closes. Statements are recorded when they settle, and a transaction's
 * COMMIT settles before its events are published, so the COMMIT of the
 * event that closes a window falls in that window. Only one workflow runs
 * at a time, so a window holds that workflow's statements, plus whatever
 * background work fell in it (a lease renewal every 10 s, the usage
 * ledger's batched flush every 250 ms), which averages out over many
 * windows and is what a real stage shares its database with too.
 */

export interface Commit {
  event: WorkflowEvent;
  /** `performance.now()` when `hub.publish` was called with it. */
  at: number;
}

/** Calls `listener` with every committed event; returns the restore function. */
export function observeCommits(hub: EventHub, listener: (commit: Commit) => void): () => void {
  const original = hub.publish;
  hub.publish = (committed) => {
    const at = performance.now();
    for (const event of committed) listener({ event, at });
    original(committed);
  };
  return () => {
    hub.publish = original;
  };
}

/** Statements of every closed window of one kind, summed. */
export interface WindowTotals {
  windows: number;
  statements: Map<string, { calls: number; totalMs: number; example: string }>;
}

export interface Windows {
  /** Starts counting from zero for a window of `label`; a window still open is dropped. */
  open(label: string): void;
  /** Adds what was counted to the open window's label; a no-op when none is open. */
  close(): void;
  isOpen(): boolean;
  totals(label: string): WindowTotals;
}

export function createWindows(counter: RoundTripCounter): Windows {
  const byLabel = new Map<string, WindowTotals>();
  let current: string | undefined;
  const totals = (label: string): WindowTotals => {
    let found = byLabel.get(label);
    if (!found) {
      found = { windows: 0, statements: new Map() };
      byLabel.set(label, found);
    }
    return found;
  };
  return {
    open(label) {
      current = label;
      counter.reset();
    },
    close() {
      if (current === undefined) return;
      add(totals(current), counter.snapshot());
      current = undefined;
    },
    isOpen: () => current !== undefined,
    totals,
  };
}

function add(into: WindowTotals, counted: StatementCount[]): void {
  into.windows += 1;
  for (const statement of counted) {
    const sum = into.statements.get(statement.kind) ?? {
      calls: 0,
      totalMs: 0,
      example: statement.example,
    };
    sum.calls += statement.calls;
    sum.totalMs += statement.totalMs;
    into.statements.set(statement.kind, sum);
  }
}

/** Round trips per window (all kinds). */
export function perWindow(totals: WindowTotals): number {
  if (totals.windows === 0) return Number.NaN;
  let calls = 0;
  for (const statement of totals.statements.values()) calls += statement.calls;
  return calls / totals.windows;
}

/** Milliseconds spent in statements per window (call to settlement, summed). */
export function msPerWindow(totals: WindowTotals): number {
  if (totals.windows === 0) return Number.NaN;
  let ms = 0;
  for (const statement of totals.statements.values()) ms += statement.totalMs;
  return ms / totals.windows;
}
