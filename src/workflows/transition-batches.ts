import { sql } from 'kysely';
import pg from 'pg';
import { type Db, WITHOUT_FLUSH_WAIT } from '../store/database.js';
import { PLANNED_EACH_RUN } from '../store/prepared-statements.js';
import type { WorkflowRow } from '../store/schema.js';
import { EVENTS_CHANNEL, encodeEvents } from '../store/workflow-events.js';
import { toEvent, toWorkflow } from './rows.js';
import { statusesBefore } from './state-machine.js';
import type { TransitionInput, TransitionResult } from './transitions.js';
import { isFinished } from './types.js';

/**
 * Group commit for the transitions runs make: while `maxInFlight`
 * statements are in PostgreSQL, the transitions that come meanwhile wait,
 * then go together, as one statement and one transaction. On a quiet
 * replica a transition finds a free slot and goes at once, alone, as
 * compareAndSet makes it, so batching adds no wait; under load the batches
 * grow by themselves.
 *
 * Why: a transition's PostgreSQL cost is mostly per statement (executor
 * start, commit, the round trip and the wake-ups on both sides), little
 * per row. Measured (a loop of the simple path's three statements per
 * workflow, 32 at once, 2-core VM, embedded PostgreSQL 18, 2026-12-01):
 * 1.23-1.43 ms of PostgreSQL CPU per workflow one statement each, 0.78-1.27
 * in batches of up to 4 and 0.35-0.6 in batches of up to 32; the client's
 * CPU 0.38-0.45 ms against 0.19 and 0.1. bench/simple-path at 32 found a
 * median of 15 transitions in flight when one more came.
 *
 * Each transition in a batch is still all or nothing: its row, turns,
 * events and NOTIFY are written together or not at all. One refused (its
 * status no longer allows it) is left out of the batch's result alone and
 * takes transitionWorkflow's locked path, as it would alone. When a
 * batch's statement fails (a constraint one transition breaks), nothing of
 * it committed, and each of its transitions is made again alone, so one
 * bad transition fails alone. A batch is one tenant's, with one transition
 * per workflow: two of one workflow wait for separate batches, in order.
 */

export interface TransitionBatches {
  /** Resolves as `compareAndSet` does: the result, or undefined when refused. */
  run(input: TransitionInput): Promise<TransitionResult | undefined>;
}

type MakeAlone = (input: TransitionInput) => Promise<TransitionResult | undefined>;

/**
 * Whether a transition can share a statement: one with writes or checks of
 * its own (a review's rows, a lease, a version or pause check, an end that
 * fails stage attempts) goes alone.
 */
export function isBatchable(input: TransitionInput): boolean {
  return (
    !input.alsoInTransaction &&
    !input.alsoInStatement?.length &&
    !input.alsoSelect?.length &&
    !input.lease &&
    input.expectedVersion === undefined &&
    !input.fromAwaiting &&
    input.to !== 'failed' &&
    input.to !== 'cancelled'
  );
}

interface Pending {
  input: TransitionInput;
  at: Date;
  resolve(result: TransitionResult | undefined): void;
  reject(error: unknown): void;
}

export function createTransitionBatches(options: {
  db: Db;
  /** How one transition is made by itself (transitions.ts: compareAndSet). */
  alone: MakeAlone;
  /** Statements in PostgreSQL at once; a transition that finds them all busy waits for the next. */
  maxInFlight: number;
  /** Transitions in one batch at most (the statement's one JSON parameter grows with them). */
  maxItems: number;
}): TransitionBatches {
  const waiting: Pending[] = [];
  let inFlight = 0;
  /** Workflows with a transition in PostgreSQL: their next one waits for it. */
  const busy = new Set<string>();

  function send(): void {
    while (inFlight < options.maxInFlight) {
      const batch = takeBatch();
      if (batch.length === 0) return;
      inFlight += 1;
      for (const pending of batch) busy.add(pending.input.workflowId);
      void write(batch).finally(() => {
        inFlight -= 1;
        for (const pending of batch) busy.delete(pending.input.workflowId);
        send();
      });
    }
  }

  /**
   * Waiting transitions of one tenant (the first's that can go), in order,
   * one per workflow and none of a workflow still in PostgreSQL, up to
   * `maxItems`; the rest wait.
   */
  function takeBatch(): Pending[] {
    const batch: Pending[] = [];
    const taken = new Set<string>();
    let tenantId: string | undefined;
    for (let index = 0; index < waiting.length && batch.length < options.maxItems; ) {
      const { input } = waiting[index] as Pending;
      const blocked = busy.has(input.workflowId) || taken.has(input.workflowId);
      if (blocked || (tenantId !== undefined && input.tenantId !== tenantId)) {
        // Also what follows a blocked workflow's transition in the queue stays behind it.
        if (blocked) taken.add(input.workflowId);
        index += 1;
        continue;
      }
      tenantId = input.tenantId;
      taken.add(input.workflowId);
      batch.push(waiting.splice(index, 1)[0] as Pending);
    }
    return batch;
  }

  async function write(batch: Pending[]): Promise<void> {
    if (batch.length === 1) return settle(batch[0] as Pending, options.alone);
    let results: (TransitionResult | undefined)[];
    try {
      results = await writeBatch(options.db, batch);
    } catch (error) {
      if (!(error instanceof pg.DatabaseError)) {
        // No answer from PostgreSQL (a connection lost): it may have committed.
        for (const pending of batch) pending.reject(error);
        return;
      }
      // PostgreSQL refused the statement, which committed nothing: each is
      // made again by itself, and the one that fails alone says why.
      await Promise.all(batch.map((pending) => settle(pending, options.alone)));
      return;
    }
    for (const [index, pending] of batch.entries()) pending.resolve(results[index]);
  }

  async function settle(pending: Pending, make: MakeAlone): Promise<void> {
    try {
      pending.resolve(await make(pending.input));
    } catch (error) {
      pending.reject(error);
    }
  }

  return {
    run: (input) =>
      new Promise((resolve, reject) => {
        waiting.push({ input, at: new Date(), resolve, reject });
        send();
      }),
  };
}

/** The batch as one statement; each transition's result, undefined for one refused. */
async function writeBatch(db: Db, batch: Pending[]): Promise<(TransitionResult | undefined)[]> {
  const tenantId = (batch[0] as Pending).input.tenantId;
  const encoded = batch.map((pending) => encodeEvents(pending.input.events, pending.at));
  const items = batch.map((pending, index) =>
    batchItem(index, pending, (encoded[index] as ReturnType<typeof encodeEvents>).json),
  );
  // Durable when any of them asks to be: the others are flushed with it.
  const durable = batch.some((pending) => pending.input.durable !== false);
  // Planned at each run, with the batch's size and the tables as they are
  // now: a generic plan, made once while a table is small, scanned every
  // workflow of the tenant for each batch (0.4 to 21 ms a transition over
  // 12,000 workflows, measured). Planning costs ~0.3-0.6 ms a batch, which
  // batches of two or more share.
  const statement = sql<WorkflowRow & { batch_item: number }>`${sql.raw(PLANNED_EACH_RUN)}
    WITH changed AS (
      UPDATE workflows w SET
        status = i.status,
        awaiting_reason = i.awaiting_reason,
        version = w.version + 1,
        updated_at = i.at,
        started_at = CASE WHEN i.starts THEN coalesce(w.started_at, i.at) ELSE w.started_at END,
        finished_at = CASE WHEN i.finishes THEN i.at ELSE w.finished_at END,
        lease_owner = CASE WHEN i.clears_lease THEN NULL ELSE w.lease_owner END,
        lease_expires_at = CASE WHEN i.clears_lease THEN NULL ELSE w.lease_expires_at END,
        kind = coalesce(i.kind, w.kind),
        result = coalesce(i.result, w.result),
        error = coalesce(i.error, w.error),
        input_tokens = w.input_tokens + i.input_tokens,
        output_tokens = w.output_tokens + i.output_tokens,
        cached_input_tokens = w.cached_input_tokens + i.cached_input_tokens,
        cost_usd = w.cost_usd + i.cost_usd,
        last_seq = w.last_seq + i.count
      FROM jsonb_to_recordset(${`[${items.join(',')}]`}::jsonb) AS i(
        n integer, id uuid, status text, awaiting_reason text,
        from_statuses text[], kind text, result jsonb, error jsonb,
        input_tokens bigint, output_tokens bigint, cached_input_tokens bigint, cost_usd numeric,
        starts boolean, finishes boolean, clears_lease boolean, at timestamptz,
        count integer, events jsonb, turns jsonb, origin text, tokens text, tokens_after integer)
      WHERE w.id = ANY(${batch.map((pending) => pending.input.workflowId)}::uuid[])
        AND w.tenant_id = ${tenantId} AND w.id = i.id AND w.status = ANY(i.from_statuses)
      -- The row as updated, and what the writes below need of the input,
      -- so that they read this CTE alone.
      RETURNING w AS workflow, w.id, w.tenant_id, w.last_seq, i.n, i.count, i.at,
        i.events, i.turns, i.origin, i.tokens, i.tokens_after
    ), turns AS (
      INSERT INTO workflow_turns (workflow_id, tenant_id, turn, state)
      SELECT c.id, c.tenant_id, t.turn, t.state
      FROM changed c, jsonb_to_recordset(c.turns) AS t(turn integer, state jsonb)
      ON CONFLICT (workflow_id, turn) DO NOTHING
    ), inserted AS (
      INSERT INTO workflow_events
        (workflow_id, tenant_id, seq, type, step, status, detail, ts, elapsed_ms)
      SELECT c.id, c.tenant_id, c.last_seq - c.count + e.i,
             e.type, e.step, e.status, e.detail, c.at, e.elapsed_ms
      FROM changed c, jsonb_to_recordset(c.events)
        AS e(i integer, type text, step text, status text, detail jsonb, elapsed_ms integer)
    ), notified AS (
      -- notificationPayload's wire shape, as eventsAfter builds it.
      SELECT pg_notify(${EVENTS_CHANNEL}, (CASE WHEN c.tokens IS NULL
        THEN json_build_object('k', 'e', 'w', c.id, 's', c.last_seq, 'o', c.origin)
        ELSE json_build_object('k', 'e', 'w', c.id, 's', c.last_seq, 'o', c.origin,
          't', c.tokens, 'a', c.last_seq - c.count + c.tokens_after) END)::text)
      FROM changed c
    )
    SELECT (c.workflow).*, c.n AS batch_item
    FROM changed c, (SELECT count(*) FROM notified) AS notified
      ${durable ? sql`` : sql`, ${WITHOUT_FLUSH_WAIT}`}`;
  const result = await statement.execute(db);
  const byItem = new Map(result.rows.map((row) => [row.batch_item, row]));
  return batch.map((pending, index) => {
    const found = byItem.get(index);
    if (!found) return undefined;
    const { batch_item: _item, ...row } = found;
    const { input } = pending;
    return {
      workflow: toWorkflow(row),
      also: {},
      events: (encoded[index] as ReturnType<typeof encodeEvents>)
        .rows({ workflowId: input.workflowId, tenantId: input.tenantId, lastSeq: row.last_seq })
        .map(toEvent),
    };
  });
}

/**
 * One transition as a row of the statement's JSON parameter, with what
 * compareAndSet would write for it. The events and turns are spliced in as
 * the JSON they already are, not parsed and encoded again.
 */
function batchItem(n: number, pending: Pending, eventsJson: string): string {
  const { input, at } = pending;
  const finished = isFinished(input.to);
  const head = JSON.stringify({
    n,
    id: input.workflowId,
    status: input.to,
    awaiting_reason: input.to === 'awaiting_input' ? (input.awaitingReason ?? 'checkpoint') : null,
    from_statuses: statusesBefore(input.to),
    kind: input.kind ?? null,
    result: input.result ?? null,
    error: input.error ?? null,
    input_tokens: input.usage?.inputTokens ?? 0,
    output_tokens: input.usage?.outputTokens ?? 0,
    cached_input_tokens: input.usage?.cachedInputTokens ?? 0,
    cost_usd: input.usage?.costUsd ?? 0,
    starts: input.to === 'running',
    finishes: finished,
    clears_lease: finished || input.to === 'awaiting_input',
    at,
    count: input.events.length,
    origin: input.origin,
    tokens: input.tokens?.text ?? null,
    tokens_after: input.tokens?.afterEvents ?? null,
  });
  const turns = (input.turnRows ?? []).map((row) => `{"turn":${row.turn},"state":${row.state}}`);
  return `${head.slice(0, -1)},"events":${eventsJson},"turns":[${turns.join(',')}]}`;
}
