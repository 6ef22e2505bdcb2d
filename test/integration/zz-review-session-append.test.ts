import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  exchangeAppend,
  exchangeAppendedColumn,
  type SessionExchange,
} from '../../src/store/sessions.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import { lockWaiter } from '../support/database.js';
import { useTrackerDatabase } from '../support/tracker-database.js';
import { event, start } from '../support/transition-batches.js';

/**
 * A completion appends its workflow's question and answer to its session in
 * its own statement (store/sessions.ts exchangeAppend, after `changed`):
 * against a real PostgreSQL, with completions racing each other and the
 * two-statement append an older replica makes during a rolling upgrade.
 */

const setup = useTrackerDatabase();
const LEASE = { owner: 'replica-a:run', leaseMs: 60_000 };

async function newSession(): Promise<string> {
  const id = randomUUID();
  await setup.handle.db
    .insertInto('sessions')
    .values({ id, tenant_id: setup.tenantId, metadata: '{}' })
    .execute();
  return id;
}

/** A running workflow of the session, under LEASE. */
async function runningIn(sessionId: string): Promise<string> {
  const id = await setup.newWorkflow();
  await setup.handle.db
    .updateTable('workflows')
    .set({ session_id: sessionId })
    .where('id', '=', id)
    .execute();
  await transitionWorkflow(setup.handle.db, start(setup, id, { lease: LEASE }));
  return id;
}

function exchangeOf(sessionId: string, workflowId: string, n: number): SessionExchange {
  return { tenantId: setup.tenantId, sessionId, workflowId, question: `q${n}`, answer: `a${n}` };
}

/** A run's completion with its session's exchange, as run-answer.ts makes it. */
function complete(exchange: SessionExchange, heldBy = LEASE.owner) {
  return transitionWorkflow(setup.handle.db, {
    tenantId: setup.tenantId,
    workflowId: exchange.workflowId,
    to: 'completed',
    result: { answer: exchange.answer, reason: 'answered' },
    events: [event('workflow_end')],
    origin: 'replica-a',
    heldBy,
    returning: 'seq',
    alsoInStatement: [exchangeAppend(exchange, { inTransition: true })],
    alsoSelect: [exchangeAppendedColumn()],
  });
}

/** The append of a replica of the release before (lock, then insert and bump), in its completion's transaction. */
async function olderReplicaAppend(exchange: SessionExchange): Promise<void> {
  await setup.handle.db.transaction().execute(async (tx) => {
    const locked = await sql<{ last_seq: number }>`
      SELECT last_seq FROM sessions
      WHERE id = ${exchange.sessionId} AND tenant_id = ${exchange.tenantId} FOR UPDATE`.execute(tx);
    const lastSeq = locked.rows[0]?.last_seq ?? 0;
    await sql`
      WITH inserted AS (
        INSERT INTO session_messages (session_id, tenant_id, seq, role, content, workflow_id)
        SELECT ${exchange.sessionId}::uuid, ${exchange.tenantId}::uuid, v.seq, v.role, v.content,
               ${exchange.workflowId}::uuid
        FROM (VALUES (${lastSeq + 1}::integer, 'user'::text, ${exchange.question}::text),
                     (${lastSeq + 2}::integer, 'assistant'::text, ${exchange.answer}::text))
             AS v (seq, role, content)
        WHERE NOT EXISTS (SELECT 1 FROM session_messages
          WHERE session_id = ${exchange.sessionId} AND workflow_id = ${exchange.workflowId})
        RETURNING *
      ), bumped AS (
        UPDATE sessions SET last_seq = (SELECT max(seq) FROM inserted), updated_at = now()
        WHERE id = ${exchange.sessionId} AND tenant_id = ${exchange.tenantId}
          AND EXISTS (SELECT 1 FROM inserted)
      )
      SELECT 1`.execute(tx);
  });
}

async function messagesOf(sessionId: string) {
  const rows = await setup.handle.db
    .selectFrom('session_messages')
    .select(['seq', 'role', 'content', 'workflow_id'])
    .where('session_id', '=', sessionId)
    .orderBy('seq')
    .execute();
  const session = await setup.handle.db
    .selectFrom('sessions')
    .select('last_seq')
    .where('id', '=', sessionId)
    .executeTakeFirstOrThrow();
  return { rows, lastSeq: session.last_seq };
}

function expectGapFreePairs(
  rows: { seq: number; role: string; content: string; workflow_id: string | null }[],
  count: number,
) {
  expect(rows.map((row) => row.seq)).toEqual(Array.from({ length: count }, (_, i) => i + 1));
  for (let index = 0; index < rows.length; index += 2) {
    const [question, answer] = [rows[index], rows[index + 1]];
    expect(question?.role).toBe('user');
    expect(answer?.role).toBe('assistant');
    expect(answer?.workflow_id).toBe(question?.workflow_id);
    expect(answer?.content).toBe(question?.content.replace('q', 'a'));
  }
}

describe('session exchanges appended by completions', () => {
  it('30 concurrent completions in one session, with older replicas’ appends among them, keep seqs gap-free', async () => {
    const sessionId = await newSession();
    const ids = await Promise.all(Array.from({ length: 30 }, () => runningIn(sessionId)));
    const older = Array.from({ length: 10 }, () => randomUUID());
    const results = await Promise.all([
      ...ids.map((id, n) => complete(exchangeOf(sessionId, id, n))),
      ...older.map((id, n) => olderReplicaAppend(exchangeOf(sessionId, id, 100 + n))),
    ]);
    for (const result of results.slice(0, ids.length)) {
      expect(result && 'also' in result ? result.also.session_appended : undefined).toBe(2);
    }
    const { rows, lastSeq } = await messagesOf(sessionId);
    expectGapFreePairs(rows, 80);
    expect(lastSeq).toBe(80);
  });

  it('a completion that waited on the session row appends after what committed meanwhile', async () => {
    const sessionId = await newSession();
    const [first, second] = [await runningIn(sessionId), await runningIn(sessionId)];
    const pool = setup.handle.pool;
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE', [sessionId]);
      // The completion's statement takes its snapshot, then waits on the session row.
      const waiting = complete(exchangeOf(sessionId, second as string, 2));
      await lockWaiter(pool, 'session_locked');
      // Meanwhile an older replica's append, in the holder's transaction, commits.
      await holder.query(
        `INSERT INTO session_messages (session_id, tenant_id, seq, role, content, workflow_id)
         VALUES ($1, $2, 1, 'user', 'q1', $3), ($1, $2, 2, 'assistant', 'a1', $3)`,
        [sessionId, setup.tenantId, first],
      );
      await holder.query('UPDATE sessions SET last_seq = 2 WHERE id = $1', [sessionId]);
      await holder.query('COMMIT');
      const result = await waiting;
      expect(result.also.session_appended).toBe(2);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
    }
    const { rows, lastSeq } = await messagesOf(sessionId);
    expectGapFreePairs(rows, 4);
    expect(lastSeq).toBe(4);
  });

  it('a completion that waited on its workflow for a cancel that committed appends nothing', async () => {
    const sessionId = await newSession();
    const id = await runningIn(sessionId);
    const pool = setup.handle.pool;
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [id]);
      const waiting = complete(exchangeOf(sessionId, id, 1));
      waiting.catch(() => undefined);
      await lockWaiter(pool, 'session_locked');
      // The cancel commits first: the completion's update finds the row ended.
      await holder.query(
        `UPDATE workflows SET status = 'cancelled', finished_at = now(), version = version + 1, lease_owner = NULL
         WHERE id = $1`,
        [id],
      );
      await holder.query('COMMIT');
      await expect(waiting).rejects.toMatchObject({ status: 409, code: 'workflow_finished' });
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
    }
    const { rows, lastSeq } = await messagesOf(sessionId);
    expect(rows).toEqual([]);
    expect(lastSeq).toBe(0);
  });

  it('a completion refused for a lost lease appends nothing', async () => {
    const sessionId = await newSession();
    const id = await runningIn(sessionId);
    await expect(complete(exchangeOf(sessionId, id, 1), 'replica-b:other')).rejects.toThrow();
    const { rows, lastSeq } = await messagesOf(sessionId);
    expect(rows).toEqual([]);
    expect(lastSeq).toBe(0);
  });
});
