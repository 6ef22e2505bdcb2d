import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { planReply, stage } from '../support/pipeline-http.js';
import { sessionHelpers } from '../support/sessions.js';
import { answer, callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { createSession, startWorkflow, waitForStatus } from '../support/workflows.js';

/**
 * What the retention sweep removes of real workflows (run to their end
 * against the fake provider) and what it keeps: a swept workflow takes
 * its events, tool-loop turns, plan and stage attempts along; its usage
 * ledger rows and its session's messages stay, as do every row of a
 * workflow still within retention or still paused. Afterwards the API
 * answers 404 for the swept workflow and still shows the session.
 */

const h = useToolLoopHarness();
const { sessionMessages } = sessionHelpers(() => h.testApp);

const STEP_TABLES = [
  'workflow_events',
  'workflow_turns',
  'workflow_plans',
  'workflow_stage_attempts',
  'llm_calls',
  'session_messages',
] as const;
type Counts = Record<(typeof STEP_TABLES)[number], number>;

/** Rows of each table that belong to the workflow. */
async function rowsOf(id: string): Promise<Counts> {
  const counts = {} as Counts;
  for (const table of STEP_TABLES) {
    const { rows } = await h.testApp.services.database.pool.query<{ count: string }>(
      `SELECT count(*) AS count FROM ${table} WHERE workflow_id = $1`,
      [id],
    );
    counts[table] = Number(rows[0]?.count);
  }
  return counts;
}

async function finishedDaysAgo(id: string, days: number): Promise<void> {
  await h.testApp.services.database.pool.query(
    `UPDATE workflows SET finished_at = now() - make_interval(days => $2),
       created_at = now() - make_interval(days => $2 + 1) WHERE id = $1`,
    [id, days],
  );
}

function get(url: string) {
  return h.testApp.app.inject({ method: 'GET', url, headers: bearer(h.tenant.key) });
}

describe('the retention sweep over workflows that ran', () => {
  it('deletes a swept workflow’s events, turns, plan and attempts, keeps its ledger rows and session messages, and touches nothing of kept workflows', async () => {
    const sessionId = await createSession(h.testApp, h.tenant.key);
    const tool = await h.registerTool('/slow/retention');

    // A pipeline of the session, 40 days finished: plan, attempts, events, ledger, messages.
    h.provider.enqueue(planReply(stage('a')), answer('Result of a.'), answer('Pipeline answer.'));
    const pipeline = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Compare two things',
      mode: 'complex',
      sessionId,
    });
    await waitForStatus(h.testApp, h.tenant.key, pipeline, ['completed']);

    // A tool loop of the session, 40 days finished: a turn row besides.
    h.provider.enqueue(callsTo({ name: tool, arguments: {} }), answer('Loop answer.'));
    const loop = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Use the tool',
      mode: 'simple',
      sessionId,
    });
    await waitForStatus(h.testApp, h.tenant.key, loop, ['completed']);

    // The same, finished 29 days ago: kept.
    h.provider.enqueue(callsTo({ name: tool, arguments: {} }), answer('Recent answer.'));
    const recent = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Use the tool again',
      mode: 'simple',
      sessionId,
    });
    await waitForStatus(h.testApp, h.tenant.key, recent, ['completed']);

    // Paused at a checkpoint for 400 days: not finished, so kept.
    h.provider.enqueue(planReply(stage('a', { checkpoint: true }), stage('b')), answer('Result.'));
    const paused = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Compare, and let me review',
      mode: 'complex',
    });
    await waitForStatus(h.testApp, h.tenant.key, paused, ['awaiting_input']);

    await finishedDaysAgo(pipeline, 40);
    await finishedDaysAgo(loop, 40);
    await finishedDaysAgo(recent, 29);
    await h.testApp.services.database.pool.query(
      `UPDATE workflows SET created_at = now() - interval '400 days' WHERE id = $1`,
      [paused],
    );
    // The ledger writes in the background (every 250 ms): written now, its rows are there to count.
    await h.testApp.services.llm.ledger.flush();
    const before = {
      pipeline: await rowsOf(pipeline),
      loop: await rowsOf(loop),
      recent: await rowsOf(recent),
      paused: await rowsOf(paused),
    };
    // Each kind of row is there to be deleted or kept.
    expect(before.pipeline.workflow_plans).toBe(1);
    expect(before.pipeline.workflow_stage_attempts).toBe(1);
    expect(before.loop.workflow_turns).toBeGreaterThan(0);
    expect(before.recent.workflow_turns).toBeGreaterThan(0);
    expect(before.paused.workflow_plans).toBe(1);
    for (const counts of Object.values(before)) {
      expect(counts.workflow_events).toBeGreaterThan(0);
      expect(counts.llm_calls).toBeGreaterThan(0);
    }

    expect((await h.testApp.services.retention.sweepOnce()).workflows).toBe(2);

    const kept = ({ llm_calls, session_messages }: Counts) => ({
      ...{ workflow_events: 0, workflow_turns: 0, workflow_plans: 0, workflow_stage_attempts: 0 },
      llm_calls,
      session_messages,
    });
    expect(await rowsOf(pipeline)).toEqual(kept(before.pipeline));
    expect(await rowsOf(loop)).toEqual(kept(before.loop));
    expect(await rowsOf(recent)).toEqual(before.recent);
    expect(await rowsOf(paused)).toEqual(before.paused);

    for (const url of [
      `/v1/workflows/${pipeline}`,
      `/v1/workflows/${pipeline}/events`,
      `/v1/workflows/${pipeline}/pipeline`,
      `/v1/workflows/${loop}`,
    ]) {
      expect((await get(url)).statusCode, url).toBe(404);
    }
    const continued = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${pipeline}/continue`,
      headers: bearer(h.tenant.key),
      payload: {},
    });
    expect(continued.statusCode).toBe(404);
    const listed = await get(`/v1/workflows?sessionId=${sessionId}`);
    expect(listed.json().items.map((item: { id: string }) => item.id)).toEqual([recent]);
    // The session keeps every exchange, those of swept workflows too, naming them.
    const messages = await sessionMessages(h.tenant.key, sessionId);
    expect(messages.map((message) => message.workflowId)).toEqual([
      pipeline,
      pipeline,
      loop,
      loop,
      recent,
      recent,
    ]);
  });

  it('a new workflow of the session still sees the exchanges of swept workflows as its history', async () => {
    const sessionId = await createSession(h.testApp, h.tenant.key);
    h.provider.enqueue(answer('Jupiter.'));
    const old = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Which planet is largest?',
      mode: 'simple',
      sessionId,
    });
    await waitForStatus(h.testApp, h.tenant.key, old, ['completed']);
    await finishedDaysAgo(old, 40);
    expect((await h.testApp.services.retention.sweepOnce()).workflows).toBe(1);

    const first = h.provider.requests.length;
    h.provider.enqueue(answer('Saturn.'));
    const next = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'And the second largest?',
      mode: 'simple',
      sessionId,
    });
    await waitForStatus(h.testApp, h.tenant.key, next, ['completed']);
    const sent = JSON.stringify(h.provider.requests[first]?.body.messages);
    expect(sent).toContain('Which planet is largest?');
    expect(sent).toContain('Jupiter.');
  });
});
