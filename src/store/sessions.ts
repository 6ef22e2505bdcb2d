import { sql } from 'kysely';
import type { DbOrTx } from './database.js';
import type { SessionMessageRow, SessionRow } from './schema.js';

export interface NewSessionRow {
  id: string;
  tenantId: string;
  title: string | null;
  metadata: Record<string, unknown>;
  model: string | null;
}

export interface NewSessionMessage {
  role: 'user' | 'assistant';
  content: string;
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

    async findById(tenantId: string, id: string): Promise<SessionRow | undefined> {
      return db
        .selectFrom('sessions')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Appends messages with the next seqs of the session, inside the
     * caller's transaction, the way workflow events are appended: the
     * session row's `last_seq` is bumped by an UPDATE whose row lock makes
     * concurrent appenders take turns, and bump and insert commit or roll
     * back together, so seqs neither repeat nor skip.
     *
     * With a `workflowId`, the append happens at most once per workflow: the
     * row is locked first, then a new statement (a fresh READ COMMITTED
     * snapshot, so it sees an append committed while we waited for the
     * lock) inserts only if the workflow has no message yet, and bumps
     * `last_seq` only by what it inserted. Bumping first and inserting with
     * ON CONFLICT DO NOTHING would leave a gap on a repeat.
     *
     * Returns the rows appended (none on a repeat), or undefined when the
     * tenant has no such session. Needs a transaction: outside one, the lock
     * would end with its own statement.
     */
    async append(input: {
      tenantId: string;
      sessionId: string;
      workflowId: string | null;
      messages: NewSessionMessage[];
    }): Promise<SessionMessageRow[] | undefined> {
      const locked = await sql<{ last_seq: number }>`
        SELECT last_seq FROM sessions
        WHERE id = ${input.sessionId} AND tenant_id = ${input.tenantId}
        FOR UPDATE`.execute(db);
      const lastSeq = locked.rows[0]?.last_seq;
      if (lastSeq === undefined) return undefined;
      if (input.messages.length === 0) return [];
      const values = input.messages.map(
        (message, index) =>
          sql`(${lastSeq + index + 1}::integer, ${message.role}::text, ${message.content}::text)`,
      );
      const notYetAppended =
        input.workflowId === null
          ? sql``
          : sql`WHERE NOT EXISTS (
              SELECT 1 FROM session_messages
              WHERE session_id = ${input.sessionId} AND workflow_id = ${input.workflowId})`;
      const appended = await sql<SessionMessageRow>`
        WITH inserted AS (
          INSERT INTO session_messages (session_id, tenant_id, seq, role, content, workflow_id)
          SELECT ${input.sessionId}::uuid, ${input.tenantId}::uuid, v.seq, v.role, v.content,
                 ${input.workflowId}::uuid
          FROM (VALUES ${sql.join(values)}) AS v (seq, role, content)
          ${notYetAppended}
          RETURNING *
        ), bumped AS (
          UPDATE sessions SET last_seq = (SELECT max(seq) FROM inserted), updated_at = now()
          WHERE id = ${input.sessionId} AND tenant_id = ${input.tenantId}
            AND EXISTS (SELECT 1 FROM inserted)
        )
        SELECT * FROM inserted ORDER BY seq`.execute(db);
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
      /** Only the messages this workflow's history holds: up to the session's seq its insert saw. */
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
        // Up to the seq the workflow's insert saw (workflows.ts
        // sessionSeqAtInsert); a workflow inserted before that was kept
        // (migration 0016) has the messages added before it was created, in
        // the database's clock. A session's workflow never starts before its
        // insert has committed (workflows/service.ts), so the row is there.
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
