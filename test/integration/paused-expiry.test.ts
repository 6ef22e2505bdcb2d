import type { PoolClient } from 'pg';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRetentionSweeper,
  type RetentionSweeperOptions,
  type SweepCounts,
} from '../../src/workflows/retention.js';
import type { TestApp } from '../support/app.js';
import { bearer } from '../support/app.js';
import { lockWaiter } from '../support/database.js';
import { eventually, listen, openStream, within } from '../support/event-streams.js';
import { pipelineRequests } from '../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import {
  createSession,
  getWorkflow,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../support/workflows.js';

/**
 * PAUSED_WORKFLOW_EXPIRY_DAYS: the retention sweep ends the workflows that
 * have waited for input longer than that, as a cancel would, with the
 * error `input_expired`. Before, a workflow nobody answered waited
 * forever: never deleted, and its session could never be deleted either.
 * Pauses are aged by moving their `paused_at` back, as the retention
 * tests move `finished_at`.
 */

const h = useToolLoopHarness({ env: { PAUSED_WORKFLOW_EXPIRY_DAYS: '7' } });
const requests = pipelineRequests(() => h);
let baseUrl: string;
let questions = 0;

beforeAll(async () => {
  baseUrl = await listen(h.testApp);
});
afterAll(async () => {
  // Streams closed by their clients leave idle sockets that would hold close() open.
  h.testApp?.app.server.closeAllConnections();
});
afterEach(async () => {
  // No test's paused workflow is left for the next test's sweep to count.
  const { rows } = await pool().query<{ id: string }>(
    `SELECT id FROM workflows WHERE status = 'awaiting_input'`,
  );
  for (const { id } of rows) await h.testApp.services.workflows.cancel(h.tenant.id, id);
});

function pool() {
  return h.testApp.services.database.pool;
}

/** A sweeper of its own over the test database: expiry after 7 days, no retention, unless `options` says otherwise. */
function sweeperWith(options: Partial<RetentionSweeperOptions> = {}) {
  return createRetentionSweeper({
    db: h.testApp.services.database.db,
    log: pino({ level: 'silent' }),
    retentionDays: 0,
    intervalMs: 1000,
    pausedExpiry: { days: 7, expire: h.testApp.services.workflows.expirePaused },
    ...options,
  });
}

function post(base: string, path: string, body: Record<string, unknown> = {}): Promise<Response> {
  return fetch(`${base}${path}`, {
    method: 'POST',
    headers: { ...bearer(h.tenant.key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** A workflow paused on an `ask_user` question; `replies` are what the model says after the answer. */
async function pausedOnQuestion(
  extra: Record<string, unknown> = {},
  ...replies: ReturnType<typeof answer>[]
): Promise<string> {
  questions += 1;
  h.provider.enqueue(
    callsTo({
      id: `call_q${questions}`,
      name: 'ask_user',
      arguments: { question: 'Which city?', question_type: 'free_text' },
    }),
    ...replies,
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input: 'What is the weather like?',
    mode: 'simple',
    ...extra,
  });
  const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
    'awaiting_input',
    'failed',
    'completed',
  ]);
  expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
  return id;
}

async function pausedDaysAgo(id: string, days: number): Promise<void> {
  await pool().query(
    `UPDATE workflows SET paused_at = now() - $2::integer * interval '1 day' WHERE id = $1`,
    [id, days],
  );
}

async function pausedAt(id: string): Promise<Date | null> {
  const { rows } = await pool().query<{ paused_at: Date | null }>(
    'SELECT paused_at FROM workflows WHERE id = $1',
    [id],
  );
  return rows[0]?.paused_at ?? null;
}

/** `waymark_workflows_finished_total{status="cancelled"}` on the sweeping replica. */
async function cancelledCount(): Promise<number> {
  const response = await h.testApp.app.inject({
    method: 'GET',
    url: '/metrics',
    headers: bearer(h.operatorKey),
  });
  expect(response.statusCode).toBe(200);
  const match = /^waymark_workflows_finished_total\{status="cancelled"\} (\d+)$/m.exec(
    response.body,
  );
  return Number(match?.[1] ?? 0);
}

/**
 * Holds, in an open transaction, the seq of the workflow's next event: the
 * next statement that appends to it waits for this transaction (the
 * primary key's uniqueness), still holding the row locks it took before.
 */
async function holdNextSeq(id: string): Promise<PoolClient> {
  const holder = await pool().connect();
  await holder.query('BEGIN');
  await holder.query(
    `INSERT INTO workflow_events (workflow_id, seq, tenant_id, type, status)
     SELECT id, last_seq + 1, tenant_id, 'warning', 'info' FROM workflows WHERE id = $1`,
    [id],
  );
  return holder;
}

async function release(holder: PoolClient): Promise<void> {
  await holder.query('ROLLBACK');
  holder.release();
}

const expiredEnd = {
  type: 'workflow_end',
  status: 'cancelled',
  detail: {
    reason: 'input expired',
    error: { code: 'input_expired', message: expect.stringContaining('7 days') },
  },
};

describe('PAUSED_WORKFLOW_EXPIRY_DAYS', () => {
  it('a question unanswered past the expiry ends cancelled with input_expired: streams on both replicas get workflow_end, the metric counts it, a late answer gets the 409 of a cancelled workflow, its session can be deleted', async () => {
    const other = await h.startReplica({});
    const otherUrl = await listen(other);
    const sessionId = await createSession(h.testApp, h.tenant.key);
    const old = await pausedOnQuestion({ sessionId });
    const young = await pausedOnQuestion();
    const cancelled = await pausedOnQuestion();
    await pausedDaysAgo(old, 8);
    await pausedDaysAgo(young, 6);
    const kept = await h.testApp.app.inject({
      method: 'DELETE',
      url: `/v1/sessions/${sessionId}`,
      headers: bearer(h.tenant.key),
    });
    expect(kept.statusCode).toBe(409);
    expect(kept.json()).toMatchObject({ code: 'session_has_open_workflows' });

    const here = openStream(`${baseUrl}/v1/workflows/${old}/events`, { key: h.tenant.key });
    const there = openStream(`${otherUrl}/v1/workflows/${old}/events`, { key: h.tenant.key });
    try {
      for (const stream of [here, there]) {
        await eventually(
          () => stream.events.some((event) => event.type === 'clarification_request'),
          10_000,
          'the question on the stream',
        );
      }
      const before = await cancelledCount();

      expect(await h.testApp.services.retention.sweepOnce()).toEqual({
        workflows: 0,
        llmCalls: 0,
        expired: 1,
      });

      for (const stream of [here, there]) {
        await within(stream.ended, 10_000, 'workflow_end on the stream');
        expect(stream.events.at(-1)).toMatchObject(expiredEnd);
      }
      expect(await cancelledCount()).toBe(before + 1);
    } finally {
      here.close();
      there.close();
    }
    expect(await getWorkflow(h.testApp, h.tenant.key, old)).toMatchObject({
      status: 'cancelled',
      awaitingReason: null,
      error: { code: 'input_expired', message: expect.stringContaining('PAUSED_WORKFLOW') },
    });
    expect(await pausedAt(old)).toBeNull();
    expect(await getWorkflow(h.testApp, h.tenant.key, young)).toMatchObject({
      status: 'awaiting_input',
      awaitingReason: 'clarification',
    });

    // A late answer: the 409 of an answer to a workflow cancelled by request.
    const cancel = await post(baseUrl, `/v1/workflows/${cancelled}/cancel`);
    expect(cancel.status).toBe(202);
    const late = await post(baseUrl, `/v1/workflows/${old}/answer`, { answer: 'Paris' });
    const toCancelled = await post(baseUrl, `/v1/workflows/${cancelled}/answer`, {
      answer: 'Paris',
    });
    expect(late.status).toBe(409);
    expect(toCancelled.status).toBe(409);
    const lateProblem = (await late.json()) as { code: string; current: { status: string } };
    const cancelledProblem = (await toCancelled.json()) as typeof lateProblem;
    expect(lateProblem.code).toBe('not_awaiting_input');
    expect(lateProblem).toMatchObject({
      code: cancelledProblem.code,
      current: { status: 'cancelled' },
    });

    const deleted = await h.testApp.app.inject({
      method: 'DELETE',
      url: `/v1/sessions/${sessionId}`,
      headers: bearer(h.tenant.key),
    });
    expect(deleted.statusCode, deleted.body).toBe(204);
  });

  it('a pipeline paused at its checkpoint past the expiry ends the same way, and a continue after it gets 409', async () => {
    const { id } = await requests.pausedAtCheckpoint('Compare the three offers');
    await pausedDaysAgo(id, 8);

    expect((await h.testApp.services.retention.sweepOnce()).expired).toBe(1);

    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'cancelled',
      error: { code: 'input_expired' },
    });
    expect((await storedEvents(h.testApp, id)).at(-1)).toMatchObject(expiredEnd);
    const late = await requests.act(id, 'continue');
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ code: 'not_awaiting_input' });
  });

  it('a pause is aged from when it paused: reads and listings leave it, an answer clears it, and the next question starts a new one the sweep leaves', async () => {
    questions += 1;
    const id = await pausedOnQuestion(
      {},
      callsTo({
        id: `call_again${questions}`,
        name: 'ask_user',
        arguments: { question: 'Which day?', question_type: 'free_text' },
      }),
    );
    await pausedDaysAgo(id, 8);
    const aged = await pausedAt(id);
    for (const url of [
      `/v1/workflows/${id}`,
      '/v1/workflows?status=awaiting_input',
      `/v1/workflows/${id}/events`,
      `/v1/workflows/${id}/trace`,
    ]) {
      // The events stream stays open while the workflow waits: its headers are enough.
      const read = await fetch(`${baseUrl}${url}`, { headers: bearer(h.tenant.key) });
      expect(read.status, url).toBe(200);
      await read.body?.cancel();
    }
    expect(await pausedAt(id)).toEqual(aged);

    const { version } = await getWorkflow(h.testApp, h.tenant.key, id);
    const answered = await post(baseUrl, `/v1/workflows/${id}/answer`, {
      answer: 'Paris',
      version,
    });
    expect(answered.status).toBe(202);
    const again = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input'], 10_000);
    expect(again.version).toBeGreaterThan(version + 1);
    const repaused = await pausedAt(id);
    expect(repaused?.getTime()).toBeGreaterThan(aged?.getTime() ?? Number.POSITIVE_INFINITY);

    expect((await h.testApp.services.retention.sweepOnce()).expired).toBe(0);
    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'awaiting_input',
    });
  });

  it('an answer that holds the workflow when the sweep comes wins: the sweep skips it without waiting for it, and the run goes on', async () => {
    const id = await pausedOnQuestion({}, answer('Sunny in Paris.'));
    await pausedDaysAgo(id, 8);
    const holder = await holdNextSeq(id);
    let answering: Promise<Response> | undefined;
    try {
      answering = post(baseUrl, `/v1/workflows/${id}/answer`, { answer: 'Paris' });
      // The answer's statement has the row and waits to append its event.
      const answerPid = await lockWaiter(pool());

      expect((await h.testApp.services.retention.sweepOnce()).expired).toBe(0);
      // The sweep is done while the answer still waits: it never waited for it.
      expect(await lockWaiter(pool())).toBe(answerPid);
    } finally {
      await release(holder);
    }
    expect((await answering)?.status).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'cancelled']);
    expect(done).toMatchObject({ status: 'completed', error: null });
    expect((await h.testApp.services.retention.sweepOnce()).expired).toBe(0);
  });

  it('an expiry that holds the workflow when an answer comes wins: the answer waits for it, then gets 409, and nothing of it is written', async () => {
    const id = await pausedOnQuestion();
    await pausedDaysAgo(id, 8);
    const requestsBefore = h.provider.requests.length;
    const holder = await holdNextSeq(id);
    let sweeping: ReturnType<typeof h.testApp.services.retention.sweepOnce> | undefined;
    let answering: Promise<Response> | undefined;
    try {
      sweeping = h.testApp.services.retention.sweepOnce();
      // The expiry's transaction has the row and waits to append its events.
      const sweepPid = await lockWaiter(pool());
      answering = post(baseUrl, `/v1/workflows/${id}/answer`, { answer: 'Paris' });
      // The answer read the workflow paused and waits for the expiry's row lock.
      await lockWaiter(pool(), undefined, sweepPid);
    } finally {
      await release(holder);
    }
    expect((await sweeping)?.expired).toBe(1);
    const late = await answering;
    expect(late?.status).toBe(409);
    expect(await late?.json()).toMatchObject({
      code: 'not_awaiting_input',
      current: { status: 'cancelled' },
    });
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => event.type)).not.toContain('clarification_answer');
    expect(events.at(-1)).toMatchObject(expiredEnd);
    expect(h.provider.requests.length).toBe(requestsBefore);
  });

  it('one row to a batch, the oldest pause held by another transaction: the sweep ends the others and leaves it to the next sweep', async () => {
    const [held, ...others] = [
      await pausedOnQuestion(),
      await pausedOnQuestion(),
      await pausedOnQuestion(),
    ] as [string, string, string];
    await pausedDaysAgo(held, 10);
    for (const id of others) await pausedDaysAgo(id, 9);
    const sweeper = sweeperWith({ batchSize: 1 });
    const holder = await pool().connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [held]);
      expect((await sweeper.sweepOnce()).expired).toBe(2);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    for (const id of others) {
      expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({ status: 'cancelled' });
    }
    expect(await getWorkflow(h.testApp, h.tenant.key, held)).toMatchObject({
      status: 'awaiting_input',
    });
    expect((await sweeper.sweepOnce()).expired).toBe(1);
    expect(await getWorkflow(h.testApp, h.tenant.key, held)).toMatchObject({
      status: 'cancelled',
      error: { code: 'input_expired' },
    });
  });

  it('a sweep the database stops still reports what it ended before (the metrics count it)', async () => {
    const [first, second] = [await pausedOnQuestion(), await pausedOnQuestion()] as [
      string,
      string,
    ];
    await pausedDaysAgo(first, 9);
    await pausedDaysAgo(second, 8);
    const reported: SweepCounts[] = [];
    const sweeper = sweeperWith({
      pausedExpiry: {
        days: 7,
        expire: async (paused) => {
          if (paused.id === second) {
            throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
          }
          return h.testApp.services.workflows.expirePaused(paused);
        },
      },
      onSwept: (counts) => reported.push(counts),
    });
    await expect(sweeper.sweepOnce()).rejects.toThrow('ECONNRESET');
    expect(reported).toEqual([{ workflows: 0, llmCalls: 0, expired: 1 }]);
    expect(await getWorkflow(h.testApp, h.tenant.key, first)).toMatchObject({
      status: 'cancelled',
    });
  });

  it('a paused workflow whose end fails alone is left to the next sweep: the others expire and the retention deletes go on', async () => {
    const [refused, other] = [await pausedOnQuestion(), await pausedOnQuestion()] as [
      string,
      string,
    ];
    await pausedDaysAgo(refused, 10);
    await pausedDaysAgo(other, 9);
    h.provider.enqueue(answer('Done.'));
    const finished = await startWorkflow(h.testApp, h.tenant.key, { input: 'Old', mode: 'simple' });
    await waitForStatus(h.testApp, h.tenant.key, finished, ['completed']);
    await pool().query(
      `UPDATE workflows SET finished_at = now() - interval '40 days' WHERE id = $1`,
      [finished],
    );
    // A row the database refuses to change: an operator's trigger, say.
    await pool().query(`
      CREATE FUNCTION refuse_one_workflow() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.id = '${refused}' THEN RAISE EXCEPTION 'refused by the test'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER refuse_one_workflow BEFORE UPDATE ON workflows
        FOR EACH ROW EXECUTE FUNCTION refuse_one_workflow();`);
    const sweeper = sweeperWith({ retentionDays: 30 });
    try {
      expect(await sweeper.sweepOnce()).toMatchObject({ expired: 1, workflows: 1 });
    } finally {
      await pool().query(
        'DROP TRIGGER refuse_one_workflow ON workflows; DROP FUNCTION refuse_one_workflow()',
      );
    }
    expect(await getWorkflow(h.testApp, h.tenant.key, other)).toMatchObject({
      status: 'cancelled',
    });
    expect(await getWorkflow(h.testApp, h.tenant.key, refused)).toMatchObject({
      status: 'awaiting_input',
    });
    const gone = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${finished}`,
      headers: bearer(h.tenant.key),
    });
    expect(gone.statusCode).toBe(404);
    expect((await sweeper.sweepOnce()).expired).toBe(1);
  });

  it('set to 0, the sweep ends no paused workflow, however long it has waited', async () => {
    const id = await pausedOnQuestion();
    await pausedDaysAgo(id, 4000);
    const never: TestApp = await h.startReplica({ PAUSED_WORKFLOW_EXPIRY_DAYS: '0' });

    expect((await never.services.retention.sweepOnce()).expired).toBe(0);

    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'awaiting_input',
      awaitingReason: 'clarification',
    });
  });
});
