import { sql } from 'kysely';
import { type DbOrTx, WITHOUT_FLUSH_WAIT } from './database.js';
import {
  EVENTS_CHANNEL,
  encodeEvents,
  eventsAfter,
  turnsWritten,
  usageWritten,
} from './event-statement-parts.js';
import { refusalOf } from './held-lease.js';
import type { NewLlmCallRow, WorkflowEventRow } from './schema.js';

export interface NewEventRow {
  type: string;
  step: string | null;
  status: string;
  detail: Record<string, unknown>;
  elapsedMs: number | null;
}

/**
 * Token text streamed between a statement's events (after the first
 * `afterEvents` of them): it is not stored, and travels in the statement's
 * NOTIFY with the seq it follows, so every replica delivers it at its
 * place among the events, without a NOTIFY of its own.
 */
export interface TokensAmongEvents {
  text: string;
  afterEvents: number;
}

/**
 * A row written in the statement that appends a batch of events or makes a
 * transition: a tool-loop turn (`workflow_turns`), its state as JSON. It
 * is inserted by a data-modifying CTE that selects FROM `source`, a CTE
 * returning the workflow row only when the statement may write (unfinished
 * for an append, changed for a transition), so the row is written if and
 * only if the events are. Data rather than SQL, so that the transitions of
 * several workflows can share one statement (workflows/transition-batches.ts).
 */
export interface TurnRow {
  turn: number;
  state: string;
}

/**
 * The events whose `detail.usage` is a model call's usage and price
 * (`llm_call`, the model check's `classification`). A `plan` event carried
 * the planning turns' usage before each turn had an `llm_call` of its own;
 * one written so is still counted (it has no such calls beside it), while
 * a `plan` event written since carries none.
 */
export const USAGE_EVENT_TYPES: readonly string[] = ['llm_call', 'plan', 'classification'];

export function workflowEventsRepository(db: DbOrTx) {
  return {
    /**
     * Appends events with the next seqs of the workflow, inside the caller's
     * transaction. Seqs come from the workflow row's `last_seq`, bumped with
     * an UPDATE: its row lock makes concurrent emitters on one workflow take
     * turns, so seqs never repeat, and since bump and insert commit or roll
     * back together they never skip. (A sequence object would leave gaps on
     * rollback; max(seq)+1 would race.) Emitters on different workflows do
     * not contend.
     */
    async append(input: {
      workflowId: string;
      tenantId: string;
      events: NewEventRow[];
      /**
       * Only a status transition may append to a finished workflow (its own
       * `workflow_end`); any other emit after the end is refused, so nothing
       * ever follows `workflow_end` in the log.
       */
      afterTransition?: boolean;
    }): Promise<WorkflowEventRow[]> {
      if (input.events.length === 0) return [];
      const unfinishedOnly = input.afterTransition
        ? sql``
        : sql`AND status NOT IN ('completed', 'failed', 'cancelled')`;
      const bumped = await sql<{ last_seq: number }>`
        UPDATE workflows SET last_seq = last_seq + ${input.events.length}, updated_at = now()
        WHERE id = ${input.workflowId} AND tenant_id = ${input.tenantId} ${unfinishedOnly}
        RETURNING last_seq`.execute(db);
      const lastSeq = bumped.rows[0]?.last_seq;
      if (lastSeq === undefined) return throwWhyNotAppended(db, input);
      const first = lastSeq - input.events.length + 1;
      return db
        .insertInto('workflow_events')
        .values(
          input.events.map((event, index) => ({
            workflow_id: input.workflowId,
            tenant_id: input.tenantId,
            seq: first + index,
            type: event.type,
            step: event.step,
            status: event.status,
            detail: JSON.stringify(event.detail),
            elapsed_ms: event.elapsedMs === null ? null : Math.round(event.elapsedMs),
          })),
        )
        .returningAll()
        .execute();
    },

    /**
     * Appends events with the next seqs (as `append` does, under the same
     * row lock) and NOTIFYs the replicas, in one statement: one round trip
     * instead of five (BEGIN, bump, insert, notify, COMMIT), which
     * bench/simple-path measured as three quarters of a workflow's round
     * trips. `writes` (a tool-loop turn) go in the same statement. A status
     * transition appends its events in its own statement
     * (workflows/transitions.ts); this is for events between transitions,
     * so a finished workflow refuses them (409), like `append`, and writes
     * nothing.
     *
     * `fastCommit` does not wait for the WAL flush (WITHOUT_FLUSH_WAIT):
     * events and turns are progress a PostgreSQL crash may undo at the cost
     * of running the step again; what the client is told is final (a
     * pause, the end) is durable and flushes them with it.
     */
    async appendNotified(input: {
      workflowId: string;
      tenantId: string;
      events: NewEventRow[];
      writes?: TurnRow[];
      /** The usage ledger's rows of the workflow's calls, written with them (usageWritten). */
      usageRows?: NewLlmCallRow[];
      /** Token text streamed among these events: carried by their NOTIFY (see eventsAfter). */
      tokens?: TokensAmongEvents;
      /** NOTIFY origin: the replica that appends, which skips its own echo. */
      origin: string;
      /** A run's append: only while its lease owner (this) holds the workflow's lease, else LeaseLostError. */
      heldBy?: string;
      fastCommit?: boolean;
    }): Promise<{ rows: WorkflowEventRow[]; lastSeq: number }> {
      const count = input.events.length;
      const writes = input.writes ?? [];
      const usage = input.usageRows ?? [];
      if (count === 0 && writes.length === 0) {
        throw new Error('appendNotified needs an event or a write');
      }
      const commitMode = input.fastCommit ? sql`, ${WITHOUT_FLUSH_WAIT}` : sql``;
      const unfinished = sql`id = ${input.workflowId} AND tenant_id = ${input.tenantId}
            AND status NOT IN ('completed', 'failed', 'cancelled')
            ${input.heldBy === undefined ? sql`` : sql`AND lease_owner = ${input.heldBy}`}`;
      if (count === 0) {
        if (input.tokens) throw new Error('token text travels in the NOTIFY of events');
        const written = await sql<{ last_seq: number }>`
          WITH source AS (SELECT id, tenant_id, last_seq FROM workflows WHERE ${unfinished}),
          ${sql.join([...turnsWritten(writes, 'source'), ...usageWritten(usage, 'source')], sql`, `)}
          SELECT source.last_seq FROM source ${commitMode}`.execute(db);
        const found = written.rows[0];
        if (!found) return throwWhyNotAppended(db, input);
        return { rows: [], lastSeq: found.last_seq };
      }
      const encoded = encodeEvents(input.events, new Date());
      const result = await sql<{ last_seq: number }>`
        WITH bumped AS (
          UPDATE workflows SET last_seq = last_seq + ${count}, updated_at = now()
          WHERE ${unfinished}
          RETURNING id, tenant_id, last_seq
        ), ${sql.join(
          [
            ...turnsWritten(writes, 'bumped'),
            ...usageWritten(usage, 'bumped'),
            eventsAfter('bumped', { ...input, encoded }),
          ],
          sql`, `,
        )}
        SELECT bumped.last_seq FROM bumped, notified ${commitMode}`.execute(db);
      const bumped = result.rows[0];
      if (!bumped) return throwWhyNotAppended(db, input);
      return {
        rows: encoded.rows({ ...input, lastSeq: bumped.last_seq }),
        lastSeq: bumped.last_seq,
      };
    },

    /**
     * Tells every replica (LISTEN) that the workflow has events up to
     * `lastSeq`. Issued once per transaction, whatever the number of events:
     * each NOTIFYing transaction takes a cluster-wide lock at commit, held
     * through its WAL flush, so notifying commits lose group commit.
     * Measured (bench/notify-cost, 2026-11-30, 2 cores, embedded
     * PostgreSQL 18, five runs on a shared machine): one-event appends from
     * 8 clients commit 1,559-2,295 tx/s without NOTIFY and 1,013-1,852 with
     * one, a 13-36% cost (median 22%) that a NOTIFY per event, rather than
     * per transaction, would multiply.
     */
    async notify(payload: string): Promise<void> {
      await sql`SELECT pg_notify(${EVENTS_CHANNEL}, ${payload})`.execute(db);
    },

    /**
     * What the workflow's model calls used since its usage was last added
     * to its totals: each pause and the end add their run's usage with a
     * `usage` event, and each model call's event (USAGE_EVENT_TYPES)
     * carries its own usage. The calls after the last `usage`
     * event are those of runs cut off by a crash or a hand-over, read by
     * the run that takes the workflow over. Only then: it reads every
     * event after the last pause.
     */
    async uncountedUsage(key: { tenantId: string; workflowId: string }): Promise<{
      inputTokens: number;
      outputTokens: number;
      cachedInputTokens: number;
      costUsd: number;
    }> {
      const { rows } = await sql<{
        input_tokens: string;
        output_tokens: string;
        cached_input_tokens: string;
        cost_usd: string;
      }>`
        SELECT coalesce(sum((detail->'usage'->>'inputTokens')::bigint), 0) AS input_tokens,
               coalesce(sum((detail->'usage'->>'outputTokens')::bigint), 0) AS output_tokens,
               coalesce(sum((detail->'usage'->>'cachedInputTokens')::bigint), 0) AS cached_input_tokens,
               coalesce(sum((detail->'usage'->>'costUsd')::numeric), 0) AS cost_usd
        FROM workflow_events
        WHERE workflow_id = ${key.workflowId} AND tenant_id = ${key.tenantId}
          AND type = ANY(${USAGE_EVENT_TYPES}::text[]) AND detail ? 'usage'
          AND seq > coalesce((
            SELECT max(seq) FROM workflow_events
            WHERE workflow_id = ${key.workflowId} AND tenant_id = ${key.tenantId} AND type = 'usage'
          ), 0)`.execute(db);
      const row = rows[0];
      return {
        inputTokens: Number(row?.input_tokens ?? 0),
        outputTokens: Number(row?.output_tokens ?? 0),
        cachedInputTokens: Number(row?.cached_input_tokens ?? 0),
        costUsd: Number(row?.cost_usd ?? 0),
      };
    },

    /** The workflow's events of one type in seq order (a pause's question, the user's answers). */
    async listOfType(input: {
      tenantId: string;
      workflowId: string;
      /** One type, or several. */
      type: string | readonly string[];
      /** Only events up to this seq: those a read of the workflow's row (its `last_seq`) had seen. */
      throughSeq?: number;
    }) {
      let query = db
        .selectFrom('workflow_events')
        .selectAll()
        .where('workflow_id', '=', input.workflowId)
        .where('tenant_id', '=', input.tenantId)
        .where('type', 'in', typeof input.type === 'string' ? [input.type] : input.type);
      if (input.throughSeq !== undefined) query = query.where('seq', '<=', input.throughSeq);
      return query.orderBy('seq').execute();
    },

    /**
     * The model calls, tool calls and stage attempts the workflow started
     * and never ended, in seq order: each `llm_call` step, each `tool_call`
     * (step and call id) and each `stage` attempt (step and attempt number)
     * whose latest event is `started`. What a run cut off by a crash or a
     * hand-over left open, or a cancel interrupts; read by the run that
     * takes the workflow over, or under the workflow row's lock.
     */
    async listOpenWork(input: {
      tenantId: string;
      workflowId: string;
    }): Promise<Pick<WorkflowEventRow, 'type' | 'step' | 'detail'>[]> {
      const { rows } = await sql<Pick<WorkflowEventRow, 'type' | 'step' | 'detail'>>`
        SELECT type, step, detail FROM (
          SELECT DISTINCT ON (type, step, item) seq, type, step, status, detail
          FROM workflow_events,
            LATERAL (SELECT CASE type
              WHEN 'tool_call' THEN detail->>'callId'
              WHEN 'stage' THEN detail->>'attempt'
            END AS item) of_type
          WHERE workflow_id = ${input.workflowId} AND tenant_id = ${input.tenantId}
            AND type IN ('llm_call', 'tool_call', 'stage')
          ORDER BY type, step, item, seq DESC
        ) latest
        WHERE status = 'started'
        ORDER BY seq`.execute(db);
      return rows;
    },

    /** Events after `afterSeq` in order, at most `limit` (replay pages). */
    async listAfter(input: {
      workflowId: string;
      afterSeq: number;
      limit: number;
      tenantId?: string;
    }) {
      let query = db
        .selectFrom('workflow_events')
        .selectAll()
        .where('workflow_id', '=', input.workflowId)
        .where('seq', '>', input.afterSeq);
      if (input.tenantId) query = query.where('tenant_id', '=', input.tenantId);
      return query.orderBy('seq').limit(input.limit).execute();
    },
  };
}

/**
 * An append found no unfinished workflow held by `heldBy`: why, as a run's
 * plan and stage-attempt writes are told (held-lease.ts refusalOf); an
 * internal error when the workflow is gone.
 */
async function throwWhyNotAppended(
  db: DbOrTx,
  input: { workflowId: string; tenantId: string; heldBy?: string },
): Promise<never> {
  const refused = await refusalOf(db, input);
  if (refused) throw refused;
  throw new Error(
    `workflow ${input.workflowId}: the append was refused, and its row (if any) shows no reason`,
  );
}
