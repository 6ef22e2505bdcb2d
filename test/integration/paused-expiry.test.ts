import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../support/app.js';
import { bearer } from '../support/app.js';
import { eventually, listen, openStream, within } from '../support/event-streams.js';
import { expiredEnd, pausedExpiry } from '../support/paused-expiry.js';
import { pipelineRequests } from '../support/pipeline-http.js';
import { callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { createSession, getWorkflow, storedEvents, waitForStatus } from '../support/workflows.js';

/**
 * PAUSED_WORKFLOW_EXPIRY_DAYS: the retention sweep ends the workflows that
 * have waited for input longer than that, as a cancel would, with the
 * error `input_expired`. Before, a workflow nobody answered waited
 * forever: never deleted, and its session could never be deleted either.
 * Pauses are aged by moving their `paused_at` back, as the retention
 * tests move `finished_at`. What the sweep does when an answer, a lock or
 * the database gets in its way: paused-expiry-races.test.ts.
 */

const h = useToolLoopHarness({ env: { PAUSED_WORKFLOW_EXPIRY_DAYS: '7' } });
const requests = pipelineRequests(() => h);
const { cancelPaused, cancelledCount, pausedAt, pausedDaysAgo, pausedOnQuestion, post } =
  pausedExpiry(() => h);
let baseUrl: string;

beforeAll(async () => {
  baseUrl = await listen(h.testApp);
});
afterAll(async () => {
  // Streams closed by their clients leave idle sockets that would hold close() open.
  h.testApp?.app.server.closeAllConnections();
});
afterEach(async () => {
  // No test's paused workflow is left for the next test's sweep to count.
  await cancelPaused();
});

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
        apiKeys: 0,
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
    const id = await pausedOnQuestion(
      {},
      callsTo({
        id: 'call_again',
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
