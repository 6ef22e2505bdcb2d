import { sql } from 'kysely';
import { type Db, WITHOUT_FLUSH_WAIT } from '../store/database.js';
import {
  EVENTS_CHANNEL,
  encodeEvents,
  eventsPayload,
  insertEvents,
  insertTurns,
  turnRowsJson,
} from '../store/event-statement-parts.js';
import { insertLlmCalls } from '../store/llm-calls.js';
import { PLANNED_EACH_RUN } from '../store/prepared-statements.js';
import type { WorkflowRow } from '../store/schema.js';
import { createStatementBatches, type StatementBatches } from '../store/statement-batches.js';
import { toEvent, toWorkflow } from './rows.js';
import { statusesBefore, transitionEffects } from './state-machine.js';
import { heldBy } from './transition-statement.js';
import type { SeqTransitionResult, TransitionInput, TransitionResult } from './transitions.js';

/**
 * The transitions runs make, in batches (store/statement-batches.ts: group
 * commit). bench/simple-path at 32 found a median of 15 transitions in
 * flight when one more came. Each transition in a batch is still all or
 * nothing: its row, turns, usage ledger rows, events and NOTIFY are
 * written together or not at all. One refused (its status no longer allows
 * it) is left out of the batch's result alone and takes
 * transitionWorkflow's locked path, as it would alone.
 */

export type TransitionBatches = StatementBatches<
  TransitionInput,
  TransitionResult | SeqTransitionResult | undefined
>;

/**
 * Whether a transition can share a statement: one with writes or checks of
 * its own (a review's rows, a lease, a version or pause check, an end that
 * fails stage attempts) goes alone.
 */
export function isBatchable(input: TransitionInput): boolean {
  return (
    !input.eventsUnderLock &&
    !input.countUncountedUsage &&
    !input.skipLocked &&
    !input.alsoInStatement?.length &&
    !input.alsoSelect?.length &&
    !input.lease &&
    input.expectedVersion === undefined &&
    !input.fromAwaiting &&
    input.to !== 'failed' &&
    input.to !== 'cancelled'
  );
}

export function createTransitionBatches(options: {
  db: Db;
  /** How one transition is made by itself (transitions.ts: compareAndSet). */
  alone: (input: TransitionInput) => Promise<TransitionResult | SeqTransitionResult | undefined>;
  maxInFlight: number;
  maxItems: number;
  maxChars: number;
}): TransitionBatches {
  return createStatementBatches({
    maxInFlight: options.maxInFlight,
    maxItems: options.maxItems,
    maxChars: options.maxChars,
    // The turns' states (tool output in them), the answer and the events.
    sizeOf: (input) =>
      (input.turnRows ?? []).reduce((sum, row) => sum + row.state.length, 0) +
      (input.result?.answer.length ?? 0) +
      input.events.length * 200,
    groupOf: (input) => input.tenantId,
    workflowOf: (input) => input.workflowId,
    writeBatch: (inputs) => writeBatch(options.db, inputs),
    alone: options.alone,
  });
}

/** The batch as one statement; each transition's result, undefined for one refused. */
async function writeBatch(
  db: Db,
  batch: TransitionInput[],
): Promise<(TransitionResult | SeqTransitionResult | undefined)[]> {
  const tenantId = (batch[0] as TransitionInput).tenantId;
  const now = new Date();
  const encoded = batch.map((input) => encodeEvents(input.events, now));
  const items = batch.map((input, index) =>
    batchItem(index, input, now, (encoded[index] as ReturnType<typeof encodeEvents>).json),
  );
  // Durable when any of them asks to be: the others are flushed with it.
  const durable = batch.some((input) => input.durable !== false);
  // The row's seq alone when no caller wants the workflow back (a run's own
  // transitions): parsing each row cost the service thread ~40 µs.
  const seqOnly = batch.every((input) => input.returning === 'seq');
  // Planned at each run, with the batch's size and the tables as they are
  // now: a generic plan, made once while a table is small, scanned every
  // workflow of the tenant for each batch (0.4 to 21 ms a transition over
  // 12,000 workflows, measured). Planning costs ~0.3-0.6 ms a batch, which
  // batches of two or more share.
  const changed = sql.raw('changed');
  const statement = sql<
    Pick<WorkflowRow, 'last_seq'> & Partial<WorkflowRow> & { batch_item: number }
  >`${sql.raw(PLANNED_EACH_RUN)}
    WITH changed AS (
      UPDATE workflows w SET
        status = i.status,
        awaiting_reason = i.awaiting_reason,
        version = w.version + 1,
        updated_at = i.at,
        started_at = CASE WHEN i.starts THEN coalesce(w.started_at, i.at) ELSE w.started_at END,
        finished_at = CASE WHEN i.finishes THEN i.at ELSE w.finished_at END,
        paused_at = CASE WHEN i.pauses THEN i.at END,
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
        pauses boolean, starts boolean, finishes boolean, clears_lease boolean, at timestamptz,
        count integer, events jsonb, turns jsonb, usage jsonb, origin text, tokens text,
        tokens_after integer, held_by text)
      WHERE w.id = ANY(${batch.map((input) => input.workflowId)}::uuid[])
        AND w.tenant_id = ${tenantId} AND w.id = i.id AND w.status = ANY(i.from_statuses)
        AND (i.held_by IS NULL OR w.lease_owner = i.held_by)
      -- The row as updated, and what the writes below need of the input,
      -- so that they read this CTE alone.
      RETURNING w AS workflow, w.id, w.tenant_id, w.last_seq, i.n, i.count, i.at,
        i.events, i.turns, i.usage, i.origin, i.tokens, i.tokens_after
    ), turns AS (${insertTurns(changed, sql`changed.turns`)}
    ), usage_written AS (${insertLlmCalls(sql`changed.usage`, changed)}
    ), inserted AS (${insertEvents({
      from: changed,
      records: sql`changed.events`,
      count: sql`changed.count`,
      ts: sql`changed.at`,
    })}
    ), notified AS (
      -- Without token text, 't' and 'a' are null and stripped.
      SELECT pg_notify(${EVENTS_CHANNEL}, json_strip_nulls(${eventsPayload({
        workflowId: sql`c.id`,
        lastSeq: sql`c.last_seq`,
        origin: sql`c.origin`,
        tokens: { text: sql`c.tokens`, afterSeq: sql`c.last_seq - c.count + c.tokens_after` },
      })})::text)
      FROM changed c
    )
    SELECT ${seqOnly ? sql`c.last_seq` : sql`(c.workflow).*`}, c.n AS batch_item
    FROM changed c, (SELECT count(*) FROM notified) AS notified
      ${durable ? sql`` : sql`, ${WITHOUT_FLUSH_WAIT}`}`;
  const result = await statement.execute(db);
  const byItem = new Map(result.rows.map((row) => [row.batch_item, row]));
  return batch.map((input, index) => {
    const found = byItem.get(index);
    if (!found) return undefined;
    const { batch_item: _item, ...row } = found;
    const result: SeqTransitionResult = {
      also: {},
      events: (encoded[index] as ReturnType<typeof encodeEvents>)
        .rows({ workflowId: input.workflowId, tenantId: input.tenantId, lastSeq: row.last_seq })
        .map(toEvent),
    };
    // Whole rows came back when one of the batch wants its workflow.
    return input.returning === 'seq'
      ? result
      : { ...result, workflow: toWorkflow(row as WorkflowRow) };
  });
}

/**
 * One transition as a row of the statement's JSON parameter, with what
 * compareAndSet would write for it. The events and turns are spliced in as
 * the JSON they already are, not parsed and encoded again.
 */
function batchItem(n: number, input: TransitionInput, at: Date, eventsJson: string): string {
  const effects = transitionEffects(input.to, input.awaitingReason);
  const head = JSON.stringify({
    n,
    id: input.workflowId,
    status: input.to,
    awaiting_reason: effects.awaitingReason,
    from_statuses: statusesBefore(input.to),
    kind: input.kind ?? null,
    result: input.result ?? null,
    error: input.error ?? null,
    input_tokens: input.usage?.inputTokens ?? 0,
    output_tokens: input.usage?.outputTokens ?? 0,
    cached_input_tokens: input.usage?.cachedInputTokens ?? 0,
    cost_usd: input.usage?.costUsd ?? 0,
    pauses: effects.pauses,
    starts: effects.starts,
    finishes: effects.finishes,
    clears_lease: effects.clearsLease,
    at,
    count: input.events.length,
    origin: input.origin,
    tokens: input.tokens?.text ?? null,
    tokens_after: input.tokens?.afterEvents ?? null,
    held_by: heldBy(input) ?? null,
  });
  const turns = turnRowsJson(input.turnRows ?? []);
  const usage = JSON.stringify(input.usageRows ?? []);
  return `${head.slice(0, -1)},"events":${eventsJson},"turns":${turns},"usage":${usage}}`;
}
