import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { answer, callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { createSession, startWorkflow, waitFor, waitForStatus } from '../support/workflows.js';

/**
 * README (Sessions): a workflow sees the exchanges of its session committed
 * when it was created, and "resumed after a pause or taken over ... sees the
 * history it started with, not exchanges completed meanwhile", whatever
 * order the exchanges' transactions began and committed in.
 *
 * First: workflow A's completion transaction begins and then waits on the
 * session row's lock (held by the test, as by a slow concurrent appender).
 * Meanwhile workflow B of the same session is created, runs its first turn
 * without A's exchange (A has not committed) and pauses on ask_user. A then
 * commits; B, answered, must still not see A's exchange (it did when the
 * history was cut by the messages' created_at, A's transaction start).
 */

const h = useToolLoopHarness();

const userTexts = (request: { body: Record<string, unknown> } | undefined): string[] =>
  ((request?.body.messages ?? []) as { role: string; content: unknown }[])
    .filter((message) => message.role === 'user' && typeof message.content === 'string')
    .map((message) => message.content as string);

describe('history of a resumed workflow vs an exchange committed after it started', () => {
  it('the resumed run sees the history its first run saw', async () => {
    const sessionId = await createSession(h.testApp, h.tenant.key);
    // A first exchange, completed normally.
    h.provider.enqueue(answer('Jupiter.'));
    const first = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Which planet is largest?',
      sessionId,
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, first, ['completed']);

    // Hold the session row, as a slow concurrent append would (store/sessions.ts
    // exchangeAppend: FOR NO KEY UPDATE, which leaves a create's insert free to hold it).
    const lock = await h.testApp.services.database.pool.connect();
    try {
      await lock.query('BEGIN');
      await lock.query('SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE', [sessionId]);
      const lockPid = (await lock.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;

      // Workflow A answers at once; its completion transaction starts and waits on the lock.
      h.provider.enqueue(answer('Paris.'));
      const a = await startWorkflow(h.testApp, h.tenant.key, {
        input: 'Capital of France?',
        sessionId,
        mode: 'simple',
      });
      await waitFor(async () => {
        // The completion's statement, blocked by the test's lock (its text
        // is longer than pg_stat_activity keeps, so not found by its end).
        const { rows } = await h.testApp.services.database.pool.query(
          `SELECT 1 FROM pg_stat_activity
           WHERE $1 = ANY(pg_blocking_pids(pid)) AND query ~ '^\\s*WITH changed AS \\(\\s*UPDATE workflows SET\\s+status'`,
          [lockPid],
        );
        return rows.length > 0 ? true : undefined;
      }, 'A’s completion to wait on the session row');

      // Workflow B of the same session: its first turn asks the user.
      const firstRequestOfB = h.provider.requests.length;
      h.provider.enqueue(
        callsTo({
          name: 'ask_user',
          arguments: { question: 'Which city?', question_type: 'free_text' },
        }),
      );
      const b = await startWorkflow(h.testApp, h.tenant.key, {
        input: 'Weather please',
        sessionId,
        mode: 'simple',
      });
      await waitForStatus(h.testApp, h.tenant.key, b, ['awaiting_input']);
      expect(userTexts(h.provider.requests[firstRequestOfB])).toEqual([
        'Which planet is largest?',
        'Weather please',
      ]);

      // A's exchange commits now, after B started.
      await lock.query('COMMIT');
      await waitForStatus(h.testApp, h.tenant.key, a, ['completed']);

      const resumedRequest = h.provider.requests.length;
      h.provider.enqueue(answer('Sunny in Oslo.'));
      const answered = await h.testApp.app.inject({
        method: 'POST',
        url: `/v1/workflows/${b}/answer`,
        headers: bearer(h.tenant.key),
        payload: { answer: 'Oslo' },
      });
      expect(answered.statusCode, answered.body).toBe(202);
      await waitForStatus(h.testApp, h.tenant.key, b, ['completed']);
      // The same history as its first run: not A's exchange, completed meanwhile.
      expect(userTexts(h.provider.requests[resumedRequest])).toEqual([
        'Which planet is largest?',
        'Weather please',
      ]);
    } finally {
      await lock.query('ROLLBACK').catch(() => undefined);
      lock.release();
    }
  });
});

describe('history read by a new workflow when exchanges commit out of transaction-start order', () => {
  it('a workflow never sees a later pair of its session without the earlier ones', async () => {
    const pool = h.testApp.services.database.pool;
    const sessionId = await createSession(h.testApp, h.tenant.key);

    // C: a tool turn, then an answer whose stream the test holds at its first chunk.
    let reached!: () => void;
    const atFirstChunk = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    h.provider.enqueue(callsTo({ name: 'calculator', arguments: { expression: '1+1' } }), {
      kind: 'reply',
      chunks: ['Answer ', 'C.'],
      betweenChunks: async (index) => {
        if (index === 0) {
          reached();
          await gate;
        }
      },
    });
    const c = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Question C',
      sessionId,
      mode: 'simple',
    });
    await atFirstChunk;
    // C's first turn is written; lock C's row so that its completion transaction begins and waits.
    await waitFor(async () => {
      const { rows } = await pool.query('SELECT 1 FROM workflow_turns WHERE workflow_id = $1', [c]);
      return rows.length > 0 ? true : undefined;
    }, 'C’s first turn');
    const rowLock = await pool.connect();
    const keyLock = await pool.connect();
    try {
      await rowLock.query('BEGIN');
      await rowLock.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [c]);
      const rowLockPid = (await rowLock.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      release();
      await waitFor(async () => {
        // C's run blocked by the test: its completion statement, its snapshot
        // taken, as a rule. On a loaded host an append of its earlier events
        // (or a lease renewal) may be the one waiting, the completion queued
        // behind it in the run: C then commits after D however it goes.
        const { rows } = await pool.query(
          'SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))',
          [rowLockPid],
        );
        return rows.length > 0 ? true : undefined;
      }, 'C’s run to wait on its row');

      // W: created with a key a test transaction holds, so its insert (its
      // transaction started) waits on the unique index.
      await keyLock.query('BEGIN');
      await keyLock.query(
        `INSERT INTO workflows (id, tenant_id, status, mode, model, input, idempotency_key)
         VALUES (gen_random_uuid(), $1, 'queued', 'simple', 'gpt', 'placeholder', 'k-hole')`,
        [h.tenant.id],
      );
      const creatingW = h.testApp.app.inject({
        method: 'POST',
        url: '/v1/workflows',
        headers: { ...bearer(h.tenant.key), 'idempotency-key': 'k-hole' },
        payload: { input: 'Question W', sessionId, mode: 'simple' },
      });
      await waitFor(async () => {
        const { rows } = await pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO workflows%'`,
        );
        return rows.length > 0 ? true : undefined;
      }, 'W’s insert to wait on the key');

      // D completes normally: the session's first pair.
      h.provider.enqueue(answer('Answer D.'));
      const d = await startWorkflow(h.testApp, h.tenant.key, {
        input: 'Question D',
        sessionId,
        mode: 'simple',
      });
      await waitForStatus(h.testApp, h.tenant.key, d, ['completed']);
      // C commits: the session's second pair.
      await rowLock.query('COMMIT');
      await waitForStatus(h.testApp, h.tenant.key, c, ['completed']);

      // W's insert goes on; its run starts after both pairs are in the session.
      h.provider.enqueue(answer('Answer W.'));
      const wRequest = h.provider.requests.length;
      await keyLock.query('ROLLBACK');
      const created = await creatingW;
      expect(created.statusCode, created.body).toBe(202);
      await waitForStatus(h.testApp, h.tenant.key, created.json().id, ['completed']);

      const session = (
        await h.testApp.services.sessions.get(h.tenant.id, sessionId, { after: 0, limit: 50 })
      ).messages.map((m) => m.content);
      expect(session.slice(0, 4)).toEqual(['Question D', 'Answer D.', 'Question C', 'Answer C.']);
      const seen = userTexts(h.provider.requests[wRequest]).slice(0, -1);
      // Whatever W sees of its session is its beginning: never pair 2 without pair 1.
      const questions = ['Question D', 'Question C'];
      expect(seen).toEqual(questions.slice(0, seen.length));
    } finally {
      await rowLock.query('ROLLBACK').catch(() => undefined);
      await keyLock.query('ROLLBACK').catch(() => undefined);
      rowLock.release();
      keyLock.release();
    }
  });
});
