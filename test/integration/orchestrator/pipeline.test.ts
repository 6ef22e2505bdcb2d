import { describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, systemTextOf, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * The complex path over HTTP against the fake provider: plan, stages,
 * checkpoint, continue / modify / retry, validation retries, synthesis.
 */

const h = useToolLoopHarness();

/** The text of every message a request carried, system prompt included. */
function textOf(request: RecordedRequest): string {
  return `${systemTextOf(request)}\n${JSON.stringify(request.body.messages)}`;
}

const { act, pipelineOf, pausedAtCheckpoint } = pipelineRequests(() => h);

describe('the pipeline', () => {
  it('plans, runs stages, pauses at a checkpoint, continues, and synthesises the answer', async () => {
    const before = h.provider.requests.length;
    const { id, version } = await pausedAtCheckpoint('Compare a, b and c');
    const view = await pipelineOf(id);
    expect(view).toMatchObject({ revision: 1, next: 'await_review', currentStageId: 'b' });
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual([
      'completed',
      'awaiting_review',
      'pending',
    ]);
    expect(view.stages[1].result).toBe('Result of b.');
    const checkpoint = (await storedEvents(h.testApp, id)).find((e) => e.type === 'checkpoint');
    expect(checkpoint).toMatchObject({
      status: 'paused',
      detail: { stage: 'b', result: 'Result of b.' },
    });

    h.provider.enqueue(answer('Result of c.'), answer('The final answer.'));
    // No body at all, the version in If-Match: as `curl -X POST -H 'If-Match: "4"'` sends it.
    const continued = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/continue`,
      headers: { ...bearer(h.tenant.key), 'if-match': `"${version}"` },
    });
    expect(continued.statusCode, continued.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'The final answer.' } });

    const requests = h.provider.requests.slice(before);
    // planner, a, b, c, synthesis: nothing ran twice.
    expect(requests).toHaveLength(5);
    expect(textOf(requests[3] as RecordedRequest)).toContain('Result of b.');
    expect(textOf(requests[4] as RecordedRequest)).toContain('Result of c.');
    const events = await storedEvents(h.testApp, id);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, index) => index + 1));
    expect(events.filter((e) => e.type === 'stage').map((e) => `${e.step}:${e.status}`)).toEqual([
      'a:started',
      'a:completed',
      'b:started',
      'b:completed',
      'c:started',
      'c:completed',
    ]);
    expect(events.find((e) => e.type === 'plan')).toMatchObject({ status: 'completed' });
    const review = events.find((e) => e.type === 'review');
    expect(review?.detail).toMatchObject({ action: 'continue', stage: 'b' });
    // The review's own statement starts the next stage: its event comes
    // right after, written by the same transaction (the same xmin).
    const reviewSeq = review?.seq as number;
    expect(events[reviewSeq]).toMatchObject({
      type: 'stage',
      step: 'c',
      status: 'started',
      detail: { attempt: 1, reason: 'first' },
    });
    const { rows: writers } = await h.testApp.services.database.pool.query<{ tx: string }>(
      'SELECT xmin::text AS tx FROM workflow_events WHERE workflow_id = $1 AND seq IN ($2, $3)',
      [id, reviewSeq, reviewSeq + 1],
    );
    expect(writers).toHaveLength(2);
    expect(writers[0]?.tx).toBe(writers[1]?.tx);
    expect(events.find((e) => e.type === 'answer')?.detail).toEqual({ text: 'The final answer.' });
  });

  it('modify re-runs the stage with the feedback, and a plan patch replaces the stages not yet run', async () => {
    const { id, version } = await pausedAtCheckpoint('Compare with a patch');
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Result of b, in metric.'));
    const modified = await act(id, 'modify', {
      feedback: 'Use metric units',
      plan: { stages: [stage('z', { goal: 'Do z instead' })] },
      version,
    });
    expect(modified.statusCode, modified.body).toBe(202);
    // The re-run of b pauses at its checkpoint again.
    const pausedAgain = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
    const rerun = h.provider.requests[before] as RecordedRequest;
    expect(textOf(rerun)).toContain('Use metric units');
    expect(textOf(rerun)).toContain('Result of b.');
    const view = await pipelineOf(id);
    expect(view.revision).toBe(2);
    expect(view.stages.map((s: { id: string }) => s.id)).toEqual(['a', 'b', 'z']);
    expect(view.stages[1].attempts.map((a: { reason: string }) => a.reason)).toEqual([
      'first',
      'user_modify',
    ]);

    h.provider.enqueue(answer('Result of z.'), answer('Answer with z.'));
    expect((await act(id, 'continue', { version: pausedAgain.version })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Answer with z.' } });
    expect(textOf(h.provider.requests.at(-2) as RecordedRequest)).toContain('Do z instead');
  });

  it('retry re-runs the stage as it was', async () => {
    const { id, version } = await pausedAtCheckpoint('Compare and retry');
    h.provider.enqueue(answer('Result of b, again.'));
    expect((await act(id, 'retry', { version })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
    const view = await pipelineOf(id);
    expect(view.stages[1]).toMatchObject({ result: 'Result of b, again.' });
    expect(
      view.stages[1].attempts.map((a: { reason: string; status: string }) => [a.reason, a.status]),
    ).toEqual([
      ['first', 'completed'],
      ['user_retry', 'completed'],
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(
      events
        .filter((e) => e.step === 'b' && (e.type === 'stage' || e.type === 'review'))
        .map((e) => `${e.type}:${e.status}`),
    ).toEqual([
      'stage:started',
      'stage:completed',
      'review:completed',
      'stage:started',
      'stage:completed',
    ]);
    expect((await act(id, 'cancel')).statusCode).toBe(202);
  });

  it('continue at a checkpoint on the last stage goes to the synthesis: no stage is begun', async () => {
    const { id, version } = await pausedAtCheckpoint('Compare a and b', []);
    h.provider.enqueue(answer('Both compared.'));
    expect((await act(id, 'continue', { version })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Both compared.' } });
    const events = await storedEvents(h.testApp, id);
    const review = events.findIndex((e) => e.type === 'review');
    expect(events.slice(review).filter((e) => e.type === 'stage')).toEqual([]);
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { attempts: unknown[] }) => s.attempts.length)).toEqual([1, 1]);
  });

  it('a stale version gets 409, and so does acting on a workflow that is not paused', async () => {
    const { id, version } = await pausedAtCheckpoint('Compare, stale');
    const stale = await act(id, 'continue', { version: version - 1 });
    expect(stale.statusCode).toBe(409);
    expect(stale.json()).toMatchObject({ code: 'stale_version', current: { version } });
    expect((await act(id, 'cancel')).statusCode).toBe(202);
    const finished = await act(id, 'retry');
    expect(finished.statusCode).toBe(409);
    expect(finished.json()).toMatchObject({
      code: 'not_awaiting_input',
      current: { status: 'cancelled' },
    });
    const invalid = await act(id, 'modify', {});
    expect(invalid.statusCode).toBe(400);
  });

  it('50 concurrent continues: exactly one is accepted, the others get 409', async () => {
    const { id } = await pausedAtCheckpoint('Compare concurrently');
    h.provider.enqueue(answer('Result of c.'), answer('Concurrent answer.'));
    const responses = await Promise.all(Array.from({ length: 50 }, () => act(id, 'continue')));
    const codes = responses.map((response) => response.statusCode);
    expect(codes.filter((code) => code === 202)).toHaveLength(1);
    expect(codes.filter((code) => code === 409)).toHaveLength(49);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Concurrent answer.' } });
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((e) => e.type === 'review')).toHaveLength(1);
  });

  it('a result failing validation is retried with the findings, then pauses stage_failed; retry then succeeds', async () => {
    h.provider.enqueue(
      planReply(stage('totals', { expectedOutput: { format: 'json', fields: ['total'] } })),
      answer('No JSON here.'),
      answer('{"sum": 3}'),
      answer('{"sum": 4}'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Add up totals',
      mode: 'complex',
    });
    const failed = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(failed).toMatchObject({ status: 'awaiting_input', awaitingReason: 'stage_failed' });
    const events = await storedEvents(h.testApp, id);
    const pause = events.findLast((e) => e.type === 'stage');
    expect(pause).toMatchObject({ status: 'paused', detail: { stage: 'totals', attempt: 3 } });
    expect(JSON.stringify(pause?.detail)).toContain('total');
    // The retries were told what failed.
    expect(textOf(h.provider.requests.at(-1) as RecordedRequest)).toContain('total');
    const view = await pipelineOf(id);
    expect(view.stages[0].attempts.map((a: { reason: string }) => a.reason)).toEqual([
      'first',
      'validation_retry',
      'validation_retry',
    ]);

    h.provider.enqueue(answer('{"total": 7}'), answer('The total is 7.'));
    expect((await act(id, 'retry', { version: failed.version })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'The total is 7.' } });
  });

  it('an invalid plan gets one repair turn quoting the problems, then the pipeline runs', async () => {
    const before = h.provider.requests.length;
    h.provider.enqueue(
      answer('Here is my plan: stages a and b.'),
      planReply(stage('a'), stage('b', { dependsOn: ['a'] })),
      answer('Result of a.'),
      answer('Result of b.'),
      answer('Repaired answer.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Plan badly first',
      mode: 'complex',
    });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Repaired answer.' } });
    const repair = h.provider.requests[before + 1] as RecordedRequest;
    expect(textOf(repair)).toContain('Here is my plan');
    expect(textOf(repair)).toMatch(/JSON/);
    const events = await storedEvents(h.testApp, id);
    expect(events.find((e) => e.type === 'plan')).toMatchObject({
      status: 'completed',
      detail: { revision: 1, repaired: true },
    });
  });

  it('a plan still invalid after its repair fails the workflow with plan_invalid', async () => {
    h.provider.enqueue(answer('No plan.'), answer('Still no plan.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Never plan',
      mode: 'complex',
    });
    const failed = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'plan_invalid' } });
    const events = await storedEvents(h.testApp, id);
    expect(events.find((e) => e.type === 'plan')).toMatchObject({ status: 'failed' });
  });

  it('GET pipeline of a simple workflow is a 404', async () => {
    h.provider.enqueue(answer('Hi.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Say hi', mode: 'simple' });
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const response = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${id}/pipeline`,
      headers: bearer(h.tenant.key),
    });
    expect(response.statusCode).toBe(404);
  });
});
