import type { Logger } from 'pino';
import { AppError } from '../errors.js';
import type { WorkflowUsageRows } from '../llm/usage-ledger.js';
import type { Db } from '../store/database.js';
import type { NewLlmCallRow } from '../store/schema.js';
import { type TokensAmongEvents, workflowEventsRepository } from '../store/workflow-events.js';
import { EarlyStartSuperseded } from '../workflows/early-start.js';
import { toEvent } from '../workflows/rows.js';
import { WorkflowLocked } from '../workflows/transitions.js';
import type { WorkflowEvent } from '../workflows/types.js';
import type { EventHub } from './event-hub.js';
import { type Batched, eventsOf, type Unit, type Waiter, writesOf } from './write-queue.js';

/**
 * Token text travels in the NOTIFY of the statement around it (PostgreSQL
 * refuses payloads of 8000 bytes or more); longer text is published by
 * itself.
 */
const MAX_INLINE_TOKEN_BYTES = 6000;

/**
 * Codes of a write refused because the workflow moved on before it: it
 * ended (`workflow_finished`), or another request's answer or review came
 * first (`not_awaiting_input`, `stale_version`), whose caller gets the 409.
 */
const MOVED_ON = new Set(['workflow_finished', 'not_awaiting_input', 'stale_version']);

/** The text's size in a NOTIFY payload, JSON-escaped. */
function inlineNotifyBytes(text: string): number {
  return Buffer.byteLength(JSON.stringify(text));
}

/** Whose writes (a workflow's), where to, and who is told. */
export interface UnitWriterOptions {
  db: Db;
  hub: EventHub;
  tenantId: string;
  workflowId: string;
  /** This replica's id, carried in the NOTIFYs. */
  origin: string;
  /**
   * A run's tracker: its writes are made only while the run holds the
   * workflow's lease (this is the owner it took it as), else refused with
   * `LeaseLostError` (TransitionInput's `heldBy`).
   */
  heldBy?: string;
  log: Logger;
  /**
   * A run started before its workflow's insert answered: nothing is
   * written before this resolves, and a rejection fails every write
   * (workflows/early-start.ts).
   */
  created?: Promise<void>;
  /**
   * A run's: the usage ledger's rows of the workflow's model calls, which
   * each statement writes with its events (UsageLedger's `rowsOf`), so
   * that the events counting a call's usage never commit without its row.
   */
  ledgerRows?: WorkflowUsageRows;
}

/**
 * Writes a workflow tracker's queue one unit at a time (write-queue.ts):
 * one statement for the unit's events, writes and token text, or its
 * transition's statement with them; then delivers what committed to this
 * replica's subscribers, in order, and tells the waiters.
 *
 * A unit that fails stops the writer: what it took along is lost, so
 * nothing after it may be written as if it had committed (a run's deferred
 * start failing must not leave its turns and events written on a workflow
 * that never started). Every later unit fails with the same error, and so
 * does every later call that waits (`throwUnreported`), until the run,
 * settling, has drained its queue and forgets it (`forgetUnreported`) to
 * write how it ends.
 */
export function createUnitWriter(options: UnitWriterOptions) {
  const { hub, tenantId, workflowId } = options;
  const workflowEvents = workflowEventsRepository(options.db);
  let failed: { error: unknown } | undefined;
  let created = options.created;

  async function writeUnit(unit: Unit): Promise<void> {
    const { items, tokens, statement, after } = unit;
    const events = eventsOf(items);
    const eventsAfter = eventsOf(after);
    // Without an event or a transition there is no NOTIFY to carry the text.
    const inline = tokens && (events.length > 0 || statement) ? tokens : undefined;
    const between = inline && { text: inline.text, afterEvents: inline.afterEvents };
    let usageRows: NewLlmCallRow[] = [];
    try {
      if (failed) throw failed.error;
      if (created) {
        await created;
        created = undefined;
      }
      if (tokens && !inline) await publishTokens(tokens);
      if (!statement && items.length === 0) return;
      const flushing = options.ledgerRows?.flushing();
      if (flushing) await flushing;
      usageRows = options.ledgerRows?.take() ?? [];
      const committed = statement
        ? await statement.run({
            events,
            writes: [...writesOf(items), ...writesOf(after)],
            usageRows,
            tokens: between,
            eventsAfter,
          })
        : (
            await workflowEvents.appendNotified({
              workflowId,
              tenantId,
              events,
              writes: writesOf(items),
              usageRows,
              tokens: between,
              origin: options.origin,
              ...(options.heldBy ? { heldBy: options.heldBy } : {}),
              fastCommit: true,
            })
          ).rows.map(toEvent);
      const ownEnd = committed.length - eventsAfter.length;
      deliver(committed, between);
      settle(items, committed);
      settle(after, committed.slice(ownEnd));
      inline?.waiter?.resolve();
      statement?.waiter.resolve(committed.slice(events.length, ownEnd));
    } catch (error) {
      // Not written with the workflow's: the ledger's flush writes them.
      if (usageRows.length > 0) options.ledgerRows?.giveBack(usageRows);
      for (const item of [...items, ...after]) item.waiter?.reject(error);
      tokens?.waiter?.reject(error);
      // The statement's caller is told; what it took along is lost with it.
      statement?.waiter.reject(error);
      if (failed) return;
      failed = { error };
      // Refused because the workflow ended meanwhile (a cancel): expected, and said by its end;
      // or moved on (an answer or review another request made first), its caller answered 409;
      // or never written, the run having been superseded;
      // or held by another transaction, which an expiry sweep's end leaves to it.
      const expected =
        (error instanceof AppError && MOVED_ON.has(error.code)) ||
        error instanceof EarlyStartSuperseded ||
        error instanceof WorkflowLocked;
      options.log[expected ? 'debug' : 'warn'](
        { err: error, workflowId },
        'a workflow write failed; nothing more of this run is written',
      );
    }
  }

  /** Committed events to this replica's subscribers, with the token text at its place among them. */
  function deliver(committed: WorkflowEvent[], tokens: TokensAmongEvents | undefined): void {
    if (!tokens) {
      hub.publish(committed);
      return;
    }
    hub.publish(committed.slice(0, tokens.afterEvents));
    hub.deliverTokens(workflowId, tokens.text);
    hub.publish(committed.slice(tokens.afterEvents));
  }

  async function publishTokens(item: { text: string; waiter: Waiter<void> | undefined }) {
    try {
      await hub.publishTokens(workflowId, item.text);
    } catch (error) {
      options.log.warn({ err: error, workflowId }, 'publishing token chunks failed');
    }
    item.waiter?.resolve();
  }

  /** Resolves the waiters of written items with their events (the items' come first in `committed`). */
  function settle(items: Batched[], committed: WorkflowEvent[]): void {
    let index = 0;
    for (const item of items) {
      if (item.kind !== 'event') {
        item.waiter?.resolve();
        continue;
      }
      // Counted whether or not the item has a waiter: an enqueued event takes its place too.
      const event = committed[index++] as WorkflowEvent;
      item.waiter?.resolve(event);
    }
  }

  return {
    write: writeUnit,
    fitsInline: (text: string) => inlineNotifyBytes(text) <= MAX_INLINE_TOKEN_BYTES,
    /** Throws the failure that stopped the writer, if one did. */
    throwUnreported(): void {
      if (failed) throw failed.error;
    },
    /** Lets the writer write again: the run has drained its queue and writes how it ends. */
    forgetUnreported(): void {
      failed = undefined;
    },
  };
}
