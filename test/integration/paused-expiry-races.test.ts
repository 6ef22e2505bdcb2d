import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SweepCounts } from '../../src/workflows/retention.js';
import { bearer } from '../support/app.js';
import { lockWaiter } from '../support/database.js';
import { listen } from '../support/event-streams.js';
import { expiredEnd, pausedExpiry } from '../support/paused-expiry.js';
import { answer, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { getWorkflow, startWorkflow, storedEvents, waitForStatus } from '../support/workflows.js';

/**
 * PAUSED_WORKFLOW_EXPIRY_DAYS when something gets in the sweep's way: an
 * answer racing the expiry for the same workflow (whichever holds the row
 * first wins, and the other neither waits nor half-writes), a pause locked
 * by another transaction, a database that stops mid-sweep, a row it
 * refuses to change. The outcomes of an expiry themselves:
 * paused-expiry.test.ts.
 */

const h = useToolLoopHarness({ env: { PAUSED_WORKFLOW_EXPIRY_DAYS: '7' } });
const {
  cancelPaused,
  holdNextSeq,
  pausedDaysAgo,
  pausedOnQuestion,
  pool,
  post,
  release,
  sweeperWith,
} = pausedExpiry(() => h);
let baseUrl: string;

beforeAll(async () => {
  baseUrl = await listen(h.testApp);
});
afterEach(async () => {
  // No test's paused workflow is left for the next test's sweep to count.
  await cancelPaused();
});

describe('PAUSED_WORKFLOW_EXPIRY_DAYS: races, locks and failures of the sweep', () => {
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
    expect(reported).toEqual([{ workflows: 0, llmCalls: 0, apiKeys: 0, expired: 1 }]);
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
});
