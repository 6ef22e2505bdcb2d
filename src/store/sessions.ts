import { sql } from 'kysely';
import type { DbOrTx } from './database.js';
import {
  type ListOrder,
  type ListPosition,
  olderThan,
  orderColumn,
  type PositionedRow,
  positionMicros,
} from './list-position.js';
import type { SessionMessageRow, SessionRow } from './schema.js';

export interface NewSessionRow {
  id: string;
  tenantId: string;
  title: string | null;
  metadata: Record<string, unknown>;
  model: string | null;
}

/** A change to a session's own fields; absent fields keep their value. */
export interface SessionChange {
  title?: string | null;
  metadata?: Record<string, unknown>;
  model?: string | null;
}

/** What a session's delete did (`deleteIfIdle`). */
export type SessionDeletion =
  | { outcome: 'not_found' }
  /** Nothing deleted: these workflows of the session have not ended (at most 20 named). */
  | { outcome: 'open_workflows'; workflowIds: string[] }
  | { outcome: 'deleted'; workflows: number };

/** A message as history reads it. */
export interface NewestMessage {
  seq: number;
  role: string;
  content: string;
}

/** A completed workflow's question and answer, appended to its session. */
export interface SessionExchange {
  tenantId: string;
  sessionId: string;
  workflowId: string;
  question: string;
  answer: string;
}

/**
 * The CTEs that append a workflow's question and answer to its session,
 * with the session's next two seqs: `session_locked` (the session row,
 * locked), `session_appended` (the two messages), `session_bumped` (its
 * `last_seq`, and its `last_activity_at` to the messages' `created_at`,
 * the transaction's now(), unless it is later already: migration 0018).
 * An append whose transaction began before another's can commit after it,
 * and would otherwise move the session back in the activity order by the
 * difference. `inTransition`: in a
 * transition's statement, only if its `changed` has a row (the workflow
 * completed), so that whoever sees the workflow completed finds its
 * exchange in the session (workflows/transitions.ts `alsoInStatement`).
 *
 * One statement, where the append took five round trips in a transaction
 * (BEGIN, lock, insert, the transition, COMMIT): a workflow in a session
 * ended in 6 round trips instead of 1 (bench/simple-path --session-turns).
 * The session row's lock makes concurrent appenders take turns; one that
 * waited for it reads the row as the one before it committed it (a row
 * locked after a wait is read again at its latest version, READ COMMITTED),
 * so the seqs follow on and neither repeat nor skip, and `last_seq` moves
 * only by what was inserted. At most once per workflow: a repeat conflicts
 * on session_messages_workflow and inserts nothing.
 */
export function exchangeAppend(exchange: SessionExchange, options?: { inTransition: boolean }) {
  const when = options?.inTransition ? sql`AND EXISTS (SELECT 1 FROM changed)` : sql``;
  return sql`session_locked AS (
      SELECT id, tenant_id, last_seq FROM sessions
      WHERE id = ${exchange.sessionId} AND tenant_id = ${exchange.tenantId} ${when}
      FOR NO KEY UPDATE
    ), session_appended AS (
      INSERT INTO session_messages (session_id, tenant_id, seq, role, content, workflow_id)
      SELECT l.id, l.tenant_id, l.last_seq + v.ord, v.role, v.content, ${exchange.workflowId}::uuid
      FROM session_locked l, (VALUES
        (1, 'user', ${exchange.question}::text),
        (2, 'assistant', ${exchange.answer}::text)) AS v (ord, role, content)
      ON CONFLICT (session_id, workflow_id, role) WHERE workflow_id IS NOT NULL DO NOTHING
      RETURNING seq
    ), session_bumped AS (
      UPDATE sessions
      SET last_seq = (SELECT max(seq) FROM session_appended), updated_at = now(),
        last_activity_at = greatest(last_activity_at, now())
      WHERE id = ${exchange.sessionId} AND tenant_id = ${exchange.tenantId}
        AND EXISTS (SELECT 1 FROM session_appended)
    )`;
}

/**
 * How many messages exchangeAppend's CTEs appended, as an `alsoSelect`
 * column of the transition they are written in (its `also.session_appended`):
 * 0 when the session is gone or has the workflow's exchange already.
 */
export function exchangeAppendedColumn() {
  return sql`(SELECT count(*)::integer FROM session_appended) AS also_session_appended`;
}

/** The `sessions` and `session_messages` rows. Every query is scoped by tenant. */
export function sessionsRepository(db: DbOrTx) {
  return {
    async insert(row: NewSessionRow): Promise<SessionRow> {
      return db
        .insertInto('sessions')
        .values({
          id: row.id,
          tenant_id: row.tenantId,
          title: row.title,
          metadata: JSON.stringify(row.metadata),
          model: row.model,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
    },

    /**
     * The session with its newest messages (at most `limit`, newest first)
     * up to its `last_seq`, in one statement: every message up to it
     * committed with it, so they begin a committed history of the session,
     * whatever order appends commit in. What a new workflow of the session
     * needs before its first model request (workflows/new-workflow-row.ts).
     */
    async findWithNewestMessages(
      tenantId: string,
      id: string,
      limit: number,
    ): Promise<(SessionRow & { newest: NewestMessage[] }) | undefined> {
      const found = await sql<SessionRow & { newest: NewestMessage[] }>`
        SELECT s.*, coalesce((
          SELECT json_agg(json_build_object('seq', m.seq, 'role', m.role, 'content', m.content)
                          ORDER BY m.seq DESC)
          FROM (
            SELECT seq, role, content FROM session_messages
            WHERE session_id = s.id AND tenant_id = s.tenant_id AND seq <= s.last_seq
            ORDER BY seq DESC LIMIT ${limit}
          ) m
        ), '[]'::json) AS newest
        FROM sessions s
        WHERE s.tenant_id = ${tenantId} AND s.id = ${id}`.execute(db);
      return found.rows[0];
    },

    /**
     * Newest first in `order` (by creation, or by last activity: the
     * sessions_tenant_created and sessions_tenant_activity indexes), at
     * most `limit`, after `after` (keyset pagination, list-position.ts, in
     * the same order); with `metadata`, only sessions whose metadata
     * contains it.
     */
    async list(
      tenantId: string,
      page: {
        order: ListOrder;
        limit: number;
        after?: ListPosition;
        metadata?: Record<string, unknown>;
      },
    ): Promise<(SessionRow & PositionedRow)[]> {
      let query = db
        .selectFrom('sessions')
        .selectAll()
        .select(positionMicros(page.order))
        .where('tenant_id', '=', tenantId);
      // Containment, which the sessions_metadata index serves (migration 0017).
      if (page.metadata)
        query = query.where(sql<boolean>`metadata @> ${JSON.stringify(page.metadata)}::jsonb`);
      if (page.after) query = query.where(olderThan(page.after));
      return query
        .orderBy(orderColumn(page.order), 'desc')
        .orderBy('id', 'desc')
        .limit(page.limit)
        .execute();
    },

    /** Applies `change` to the session's own fields; undefined when the tenant has no such session. */
    async update(
      tenantId: string,
      id: string,
      change: SessionChange,
    ): Promise<SessionRow | undefined> {
      return db
        .updateTable('sessions')
        .set((eb) => ({
          ...(change.title !== undefined ? { title: change.title } : {}),
          ...(change.metadata !== undefined ? { metadata: JSON.stringify(change.metadata) } : {}),
          ...(change.model !== undefined ? { model: change.model } : {}),
          updated_at: eb.fn('now', []),
        }))
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirst();
    },

    /**
     * Locks the session's row for its delete (`deleteIfIdle`, next, in the
     * same transaction). In a statement of its own: a create whose insert
     * holds the session (workflows.ts `sessionStillThere`) commits first,
     * and the delete's statement, whose snapshot is taken after, sees its
     * workflow open. Locked within that statement, the wait ended with the
     * snapshot from before the workflow was there, and the session went
     * with the new workflow left in it.
     */
    async lockForDelete(tenantId: string, id: string): Promise<void> {
      await sql`SELECT 1 FROM sessions WHERE tenant_id = ${tenantId} AND id = ${id} FOR UPDATE`.execute(
        db,
      );
    },

    /**
     * Deletes the session, its messages (ON DELETE CASCADE) and its
     * workflows, all ended, with their events and turns (migration 0011's
     * trigger), in one statement, after `lockForDelete` in its transaction;
     * deletes nothing while a workflow of the session is queued, running or
     * paused. The session row's lock orders it with a completion appending
     * to the session (exchangeAppend), which then finds the session gone and
     * appends nothing.
     */
    async deleteIfIdle(tenantId: string, id: string): Promise<SessionDeletion> {
      const { rows } = await sql<{ found: boolean; open: string[] | null; workflows: number }>`
        WITH target AS (
          SELECT id FROM sessions WHERE tenant_id = ${tenantId} AND id = ${id} FOR UPDATE
        ), open AS (
          SELECT w.id FROM workflows w
          WHERE w.tenant_id = ${tenantId} AND w.session_id = ${id}
            AND w.status IN ('queued', 'running', 'awaiting_input')
            AND EXISTS (SELECT 1 FROM target)
          ORDER BY w.created_at LIMIT 20
        ), deleted_workflows AS (
          DELETE FROM workflows w
          WHERE w.tenant_id = ${tenantId} AND w.session_id = ${id}
            AND w.status IN ('completed', 'failed', 'cancelled')
            AND EXISTS (SELECT 1 FROM target) AND NOT EXISTS (SELECT 1 FROM open)
          RETURNING w.id
        ), deleted AS (
          DELETE FROM sessions s USING target
          WHERE s.id = target.id AND NOT EXISTS (SELECT 1 FROM open)
          RETURNING s.id
        )
        SELECT EXISTS (SELECT 1 FROM target) AS found,
          (SELECT array_agg(id::text) FROM open) AS open,
          (SELECT count(*)::integer FROM deleted_workflows) AS workflows`.execute(db);
      const row = rows[0];
      if (!row?.found) return { outcome: 'not_found' };
      if (row.open) return { outcome: 'open_workflows', workflowIds: row.open };
      return { outcome: 'deleted', workflows: row.workflows };
    },

    async findById(tenantId: string, id: string): Promise<SessionRow | undefined> {
      return db
        .selectFrom('sessions')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Appends a workflow's question and answer to its session, in a
     * statement of its own (exchangeAppend). Returns the rows appended,
     * none when the workflow's are there already or the tenant has no such
     * session.
     */
    async appendExchange(exchange: SessionExchange): Promise<{ seq: number }[]> {
      const appended = await sql<{ seq: number }>`
        WITH ${exchangeAppend(exchange)}
        SELECT seq FROM session_appended ORDER BY seq`.execute(db);
      return appended.rows;
    },

    /** Messages after `afterSeq` in order, at most `limit` (pages of the API). */
    async listAfter(input: {
      tenantId: string;
      sessionId: string;
      afterSeq: number;
      /** And up to this seq: the session's `last_seq` as read with it, so the page matches that read. */
      throughSeq: number;
      limit: number;
    }): Promise<SessionMessageRow[]> {
      return db
        .selectFrom('session_messages')
        .selectAll()
        .where('session_id', '=', input.sessionId)
        .where('tenant_id', '=', input.tenantId)
        .where('seq', '>', input.afterSeq)
        .where('seq', '<=', input.throughSeq)
        .orderBy('seq')
        .limit(input.limit)
        .execute();
    },

    /**
     * Messages before `beforeSeq` (from the end when absent), newest first,
     * at most `limit`: history is read backwards, only as far as its token
     * budget reaches.
     */
    async listBefore(input: {
      tenantId: string;
      sessionId: string;
      beforeSeq?: number;
      /** Only the messages this workflow's history holds: up to the session's seq its row keeps. */
      beforeWorkflow?: string;
      limit: number;
    }): Promise<SessionMessageRow[]> {
      let query = db
        .selectFrom('session_messages')
        .selectAll()
        .where('session_id', '=', input.sessionId)
        .where('tenant_id', '=', input.tenantId);
      if (input.beforeSeq !== undefined) query = query.where('seq', '<', input.beforeSeq);
      if (input.beforeWorkflow !== undefined) {
        // Up to the seq the workflow's row keeps (workflows.ts
        // NewWorkflowRow's `sessionSeq`); a workflow inserted before that was
        // kept (migration 0016) has the messages added before it was created,
        // in the database's clock. Only a run of a workflow already inserted
        // reads this way: a new one's history starts with what its create
        // read (sessions/service.ts `findForWorkflow`), the rest lying before.
        query = query.where(
          sql<boolean>`seq <= (
            SELECT coalesce(w.session_seq, (
              SELECT max(m.seq) FROM session_messages m
              WHERE m.session_id = w.session_id::uuid AND m.tenant_id = w.tenant_id
                AND m.created_at < w.created_at
            ), 0)
            FROM workflows w
            WHERE w.id = ${input.beforeWorkflow} AND w.tenant_id = ${input.tenantId}
          )`,
        );
      }
      return query.orderBy('seq', 'desc').limit(input.limit).execute();
    },
  };
}

export type SessionsRepository = ReturnType<typeof sessionsRepository>;
