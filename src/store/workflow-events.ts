import { type RawBuilder, sql } from 'kysely';
import { conflict } from '../errors.js';
import { type DbOrTx, WITHOUT_FLUSH_WAIT } from './database.js';
import type { WorkflowEventRow } from './schema.js';

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

/** The NOTIFY channel every replica listens on. */
export const EVENTS_CHANNEL = 'waymark_events';

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

/** Turn rows as the JSON array a statement reads them from; their states are JSON already. */
export function turnRowsJson(rows: TurnRow[]): string {
  return `[${rows.map((row) => `{"turn":${row.turn},"state":${row.state}}`).join(',')}]`;
}

/**
 * The INSERT of turn rows read from `records` (a jsonb array of
 * `{turn, state}`), each for the workflow whose row of `from` it is read
 * with. A turn cut off midway runs again (at-least-once), so a second
 * write of the same turn number keeps the first one.
 */
export function insertTurns(
  from: RawBuilder<unknown>,
  records: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`INSERT INTO workflow_turns (workflow_id, tenant_id, turn, state)
      SELECT ${from}.id, ${from}.tenant_id, t.turn, t.state
      FROM ${from}, jsonb_to_recordset(${records}) AS t(turn integer, state jsonb)
      ON CONFLICT (workflow_id, turn) DO NOTHING`;
}

/** `rows` as the CTE `turns_written`, selecting from the CTE named `source`; none without rows. */
export function turnsWritten(
  rows: TurnRow[],
  source: 'bumped' | 'changed' | 'source',
): RawBuilder<unknown>[] {
  if (rows.length === 0) return [];
  return [turnsWrittenFrom(source, sql`${turnRowsJson(rows)}`)];
}

/** The CTE `turns_written` of the turn rows in `rowsJson` (turnRowsJson's text). */
export function turnsWrittenFrom(
  source: 'bumped' | 'changed' | 'source',
  rowsJson: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`turns_written AS (${insertTurns(sql.raw(source), sql`${rowsJson}::jsonb`)})`;
}

/**
 * The INSERT of a statement's events read from `records` (a jsonb array as
 * encodeEvents makes it), for the workflow whose row of `from` they are
 * read with: their seqs run up to that row's `last_seq`, just raised by
 * `count` under its row lock.
 */
export function insertEvents(parts: {
  from: RawBuilder<unknown>;
  records: RawBuilder<unknown>;
  count: RawBuilder<unknown>;
  ts: RawBuilder<unknown>;
}): RawBuilder<unknown> {
  const { from } = parts;
  return sql`INSERT INTO workflow_events
        (workflow_id, tenant_id, seq, type, step, status, detail, ts, elapsed_ms)
      SELECT ${from}.id, ${from}.tenant_id, ${from}.last_seq - ${parts.count} + e.i,
             e.type, e.step, e.status, e.detail, ${parts.ts}, e.elapsed_ms
      FROM ${from}, jsonb_to_recordset(${parts.records})
        AS e(i integer, type text, step text, status text, detail jsonb, elapsed_ms integer)`;
}

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
      /** Token text streamed among these events: carried by their NOTIFY (see eventsAfter). */
      tokens?: TokensAmongEvents;
      /** NOTIFY origin: the replica that appends, which skips its own echo. */
      origin: string;
      fastCommit?: boolean;
    }): Promise<{ rows: WorkflowEventRow[]; lastSeq: number }> {
      const count = input.events.length;
      const writes = input.writes ?? [];
      if (count === 0 && writes.length === 0) {
        throw new Error('appendNotified needs an event or a write');
      }
      const commitMode = input.fastCommit ? sql`, ${WITHOUT_FLUSH_WAIT}` : sql``;
      const unfinished = sql`id = ${input.workflowId} AND tenant_id = ${input.tenantId}
            AND status NOT IN ('completed', 'failed', 'cancelled')`;
      if (count === 0) {
        if (input.tokens) throw new Error('token text travels in the NOTIFY of events');
        const written = await sql<{ last_seq: number }>`
          WITH source AS (SELECT id, tenant_id, last_seq FROM workflows WHERE ${unfinished}),
          ${sql.join(turnsWritten(writes, 'source'), sql`, `)}
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
        ), ${sql.join([...turnsWritten(writes, 'bumped'), eventsAfter('bumped', { ...input, encoded })], sql`, `)}
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

    /** The workflow's events of one type in seq order (a pause's question, the user's answers). */
    async listOfType(input: { tenantId: string; workflowId: string; type: string }) {
      return db
        .selectFrom('workflow_events')
        .selectAll()
        .where('workflow_id', '=', input.workflowId)
        .where('tenant_id', '=', input.tenantId)
        .where('type', '=', input.type)
        .orderBy('seq')
        .execute();
    },

    /**
     * The model and tool calls the workflow started and never ended, in
     * seq order: each `llm_call` step and each `tool_call` (step and call
     * id) whose latest event is `started`. What a run cut off by a crash
     * or a hand-over left open; read by the run that takes the workflow over.
     */
    async listOpenCalls(input: {
      tenantId: string;
      workflowId: string;
    }): Promise<Pick<WorkflowEventRow, 'type' | 'step' | 'detail'>[]> {
      const { rows } = await sql<Pick<WorkflowEventRow, 'type' | 'step' | 'detail'>>`
        SELECT type, step, detail FROM (
          SELECT DISTINCT ON (type, step, detail->>'callId') seq, type, step, status, detail
          FROM workflow_events
          WHERE workflow_id = ${input.workflowId} AND tenant_id = ${input.tenantId}
            AND type IN ('llm_call', 'tool_call')
          ORDER BY type, step, detail->>'callId', seq DESC
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

/** An append found no unfinished workflow: 409 when it is finished, an internal error when it is gone. */
async function throwWhyNotAppended(
  db: DbOrTx,
  input: { workflowId: string; tenantId: string },
): Promise<never> {
  const exists = await db
    .selectFrom('workflows')
    .select('status')
    .where('id', '=', input.workflowId)
    .where('tenant_id', '=', input.tenantId)
    .executeTakeFirst();
  if (exists) throw conflict('workflow_finished', `The workflow is already ${exists.status}`);
  throw new Error(`workflow ${input.workflowId} does not exist`);
}

/**
 * A statement's events as it inserts them: one JSON parameter, with the
 * time they are stored under. The statement returns none of them: once it
 * has said the seqs (its workflow's new `last_seq`), `rows` are the rows it
 * stored, their details read back from the same JSON, so they hold what the
 * store holds (Dates as text, no undefined; jsonb's key order aside) and
 * nothing the caller changes later. Returning them cost PostgreSQL a sort,
 * a json_agg and ~2 KB a statement on the wire, and this side a parse of
 * every column.
 */
export interface EncodedEvents {
  count: number;
  json: string;
  ts: Date;
  rows(stored: { workflowId: string; tenantId: string; lastSeq: number }): WorkflowEventRow[];
}

export function encodeEvents(events: NewEventRow[], ts: Date): EncodedEvents {
  const json = JSON.stringify(
    events.map((event, index) => ({
      i: index + 1,
      type: event.type,
      step: event.step,
      status: event.status,
      detail: event.detail,
      elapsed_ms: event.elapsedMs === null ? null : Math.round(event.elapsedMs),
    })),
  );
  return {
    count: events.length,
    json,
    ts,
    rows({ workflowId, tenantId, lastSeq }) {
      const records = JSON.parse(json) as EncodedEvent[];
      return records.map((record) => ({
        workflow_id: workflowId,
        tenant_id: tenantId,
        seq: lastSeq - records.length + record.i,
        type: record.type,
        step: record.step,
        status: record.status,
        detail: record.detail,
        ts,
        elapsed_ms: record.elapsed_ms,
      }));
    },
  };
}

interface EncodedEvent {
  i: number;
  type: string;
  step: string | null;
  status: string;
  detail: Record<string, unknown>;
  elapsed_ms: number | null;
}

/**
 * The `inserted` and `notified` CTEs of an append: the encoded events get
 * the seqs up to the `last_seq` that the CTE `source` (a workflows row
 * whose last_seq was just raised by their number, under its row lock)
 * returned, and one NOTIFY says so. The payload is `notificationPayload`'s
 * wire shape (tracker/notification.ts), built here because the seq is
 * known only in SQL.
 */
export function eventsAfter(
  source: 'bumped' | 'changed',
  input: { encoded: EncodedEvents; origin: string; tokens?: TokensAmongEvents },
) {
  const { encoded, tokens } = input;
  return eventsAfterFrom(source, {
    json: sql`${encoded.json}`,
    count: sql`${encoded.count}`,
    ts: sql`${encoded.ts}`,
    channel: sql`${EVENTS_CHANNEL}`,
    origin: sql`${input.origin}`,
    tokens: tokens && { text: sql`${tokens.text}`, afterEvents: sql`${tokens.afterEvents}` },
  });
}

/**
 * eventsAfter with its values as statement parts (parameters, or a fixed
 * statement's slots): the encoded events' JSON, their count and time, the
 * channel, the origin and the token text among them.
 */
export function eventsAfterFrom(
  source: 'bumped' | 'changed',
  parts: {
    json: RawBuilder<unknown>;
    count: RawBuilder<unknown>;
    ts: RawBuilder<unknown>;
    channel: RawBuilder<unknown>;
    origin: RawBuilder<unknown>;
    tokens: { text: RawBuilder<unknown>; afterEvents: RawBuilder<unknown> } | undefined;
  },
) {
  const from = sql.raw(source);
  const { tokens } = parts;
  return sql`inserted AS (${insertEvents({
    from,
    records: sql`${parts.json}::jsonb`,
    count: parts.count,
    ts: sql`${parts.ts}::timestamptz`,
  })}), notified AS (
      SELECT pg_notify(${parts.channel}, ${eventsPayload({
        workflowId: sql`${from}.id`,
        lastSeq: sql`${from}.last_seq`,
        origin: sql`${parts.origin}::text`,
        tokens: tokens && {
          text: sql`${tokens.text}::text`,
          afterSeq: sql`${from}.last_seq - ${parts.count} + ${tokens.afterEvents}`,
        },
      })}::text)
      FROM ${from}
    )`;
}

/**
 * notificationPayload's wire shape (tracker/notification.ts) for an
 * `events` notification, built in SQL from the statement's expressions,
 * because the seq is known only there; the one place that does.
 */
export function eventsPayload(parts: {
  workflowId: RawBuilder<unknown>;
  lastSeq: RawBuilder<unknown>;
  origin: RawBuilder<unknown>;
  tokens?: { text: RawBuilder<unknown>; afterSeq: RawBuilder<unknown> } | undefined;
}): RawBuilder<unknown> {
  const { tokens } = parts;
  return sql`json_build_object('k', 'e', 'w', ${parts.workflowId}, 's', ${parts.lastSeq},
    'o', ${parts.origin}${tokens ? sql`, 't', ${tokens.text}, 'a', ${tokens.afterSeq}` : sql``})`;
}
