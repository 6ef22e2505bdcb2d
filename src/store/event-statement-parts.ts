import { type RawBuilder, sql } from 'kysely';
import { insertLlmCalls } from './llm-calls.js';
import type { NewLlmCallRow, WorkflowEventRow } from './schema.js';
import type { NewEventRow, TokensAmongEvents, TurnRow } from './workflow-events.js';

/**
 * The parts of the statements that append a workflow's events and turns
 * (workflow-events.ts) or make its transitions (workflows/transitions.ts,
 * transition-batches.ts): their events and turns as JSON parameters, the
 * CTEs that insert them, and the NOTIFY that announces them.
 */

/** The NOTIFY channel every replica listens on. */
export const EVENTS_CHANNEL = 'waymark_events';

/** Turn rows as the JSON array a statement reads them from; their states are JSON already. */
export function turnRowsJson(rows: TurnRow[]): string {
  return `[${rows.map((row) => `{"turn":${row.turn},"state":${row.state}}`).join(',')}]`;
}

/**
 * The INSERT of turn rows read from `records` (a jsonb array of
 * `{turn, state}`), each for the workflow whose row of `from` it is read
 * with. A turn cut off midway runs again (at-least-once), so a second
 * write of the same turn number keeps the first one, but for one case: a
 * turn written while some of its calls waited for the user (`awaiting`
 * set) is written again as those calls get their results (an approved
 * call's result exists nowhere else; tool-loop/held-calls.ts), and the
 * write with more results replaces it. At most once per call of the turn,
 * so no row is rewritten at every step.
 */
export function insertTurns(
  from: RawBuilder<unknown>,
  records: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`INSERT INTO workflow_turns (workflow_id, tenant_id, turn, state)
      SELECT ${from}.id, ${from}.tenant_id, t.turn, t.state
      FROM ${from}, jsonb_to_recordset(${records}) AS t(turn integer, state jsonb)
      ON CONFLICT (workflow_id, turn) DO UPDATE SET state = excluded.state
        WHERE workflow_turns.state -> 'awaiting' <> 'null'::jsonb
          AND jsonb_array_length(excluded.state -> 'toolResults')
            > jsonb_array_length(workflow_turns.state -> 'toolResults')`;
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
 * The CTE `usage_written`: the usage ledger's rows of the workflow's model
 * calls (llm/usage-ledger.ts: takeRowsOf), written with the events that
 * count their usage, or not at all; none without rows.
 */
export function usageWritten(
  rows: NewLlmCallRow[],
  source: 'bumped' | 'changed' | 'source',
): RawBuilder<unknown>[] {
  if (rows.length === 0) return [];
  return [usageWrittenFrom(source, sql`${JSON.stringify(rows)}`)];
}

/** The CTE `usage_written` of the ledger rows in `rowsJson` (a JSON array of NewLlmCallRow). */
export function usageWrittenFrom(
  source: 'bumped' | 'changed' | 'source',
  rowsJson: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`usage_written AS (${insertLlmCalls(sql`${rowsJson}::jsonb`, sql.raw(source))})`;
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
