import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { listen, openStream, within } from '../../support/event-streams.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, systemTextOf, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A `modify` with a plan, as a client drawing the pipeline from its events
 * sees it: the new revision comes as a `plan` event, written with the
 * review, live and on replay; an empty plan drops the stages after the
 * paused one, so the synthesis follows its re-run.
 */

// No validation retries: a stage whose result fails validation pauses at once.
const h = useToolLoopHarness({ env: { PIPELINE_STAGE_RETRIES: '0' } });
const { act, pipelineOf, pausedAtCheckpoint } = pipelineRequests(() => h);
let baseUrl: string;
beforeAll(async () => {
  baseUrl = await listen(h.testApp);
});
afterAll(async () => {
  // Streams closed by their clients leave idle sockets that would hold close() open.
  h.testApp?.app.server.closeAllConnections();
});

/** `type:step:status` of each event, to compare orders at a glance. */
const shapes = (events: readonly Pick<StoredEvent, 'type' | 'step' | 'status'>[]) =>
  events.map((event) => `${event.type}:${event.step}:${event.status}`);

/** The transaction that wrote each of these seqs of the workflow's events. */
async function writersOf(id: string, seqs: number[]): Promise<string[]> {
  const { rows } = await h.testApp.services.database.pool.query<{ tx: string }>(
    'SELECT xmin::text AS tx FROM workflow_events WHERE workflow_id = $1 AND seq = ANY($2) ORDER BY seq',
    [id, seqs],
  );
  return rows.map((row) => row.tx);
}

/** The text of every message a request carried, system prompt included. */
function textOf(request: RecordedRequest | undefined): string {
  return `${systemTextOf(request)}\n${JSON.stringify(request?.body.messages)}`;
}

describe('modify with a plan', () => {
  it('writes a plan event for the new revision between the review and the re-run’s start, in their transaction, live and on replay', async () => {
    const { id, version } = await pausedAtCheckpoint('Modify: the plan event');
    const eventsUrl = `${baseUrl}/v1/workflows/${id}/events`;
    const live = openStream(eventsUrl, { key: h.tenant.key });
    try {
      h.provider.enqueue(answer('Result of b, in metric.'));
      const modified = await act(id, 'modify', {
        feedback: 'Use metric units',
        plan: { stages: [stage('z', { goal: 'Do z instead', dependsOn: ['b'] })] },
        version,
      });
      expect(modified.statusCode, modified.body).toBe(202);
      const again = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
      h.provider.enqueue(answer('Result of z.'), answer('Answer with z.'));
      expect((await act(id, 'continue', { version: again.version })).statusCode).toBe(202);
      await within(live.ended, 10_000, 'the live stream to end');
    } finally {
      live.close();
    }

    const events = await storedEvents(h.testApp, id);
    const plans = events.filter((event) => event.type === 'plan');
    expect(plans.map((event) => event.detail)).toEqual([
      expect.objectContaining({ revision: 1, source: 'planner', repaired: false }),
      {
        revision: 2,
        source: 'modify',
        stages: [
          { id: 'a', title: 'Stage a', goal: 'Do a', checkpoint: false },
          { id: 'b', title: 'Stage b', goal: 'Do b', checkpoint: true },
          { id: 'z', title: 'Stage z', goal: 'Do z instead', dependsOn: ['b'], checkpoint: false },
        ],
      },
    ]);
    // No planner turn made it: no usage, no time.
    expect(plans[1]).toMatchObject({ step: 'plan', status: 'completed', elapsed_ms: null });
    const review = events.findIndex((event) => event.type === 'review');
    const reviewed = events.slice(review, review + 3);
    expect(shapes(reviewed)).toEqual([
      'review:b:completed',
      'plan:plan:completed',
      'stage:b:started',
    ]);
    expect(reviewed[0]?.detail).toMatchObject({ action: 'modify', planReplaced: true });
    const writers = await writersOf(
      id,
      reviewed.map((event) => event.seq),
    );
    expect(new Set(writers).size).toBe(1);
    // What the plan event says is what the pipeline runs.
    const view = await pipelineOf(id);
    expect(view.revision).toBe(2);
    expect(view.stages.map((s: { id: string }) => s.id)).toEqual(['a', 'b', 'z']);

    // The live stream carried every stored event, in seq order.
    expect(live.events.map((event) => [event.seq, event.type])).toEqual(
      events.map((event) => [event.seq, event.type]),
    );
    // A client reconnecting after the review gets the plan event first, then the rest in order.
    const replay = openStream(eventsUrl, {
      key: h.tenant.key,
      lastEventId: String(events[review]?.seq),
    });
    try {
      await within(replay.ended, 10_000, 'the replay to end');
    } finally {
      replay.close();
    }
    const after = events.slice(review + 1);
    expect(replay.events.map((event) => event.seq)).toEqual(after.map((event) => event.seq));
    expect(replay.events[0]).toMatchObject({
      type: 'plan',
      detail: { revision: 2, source: 'modify' },
    });
  });

  it('a modify without a plan writes no plan event: the revision stays 1', async () => {
    const { id, version } = await pausedAtCheckpoint('Modify: no plan');
    h.provider.enqueue(answer('Result of b, shorter.'));
    expect((await act(id, 'modify', { feedback: 'Shorter', version })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((event) => event.type === 'plan')).toHaveLength(1);
    const review = events.findIndex((event) => event.type === 'review');
    expect(shapes(events.slice(review, review + 2))).toEqual([
      'review:b:completed',
      'stage:b:started',
    ]);
    expect((await pipelineOf(id)).revision).toBe(1);
    expect((await act(id, 'cancel')).statusCode).toBe(202);
  });
});

describe('modify with an empty plan', () => {
  it('at a checkpoint: drops the stages after it, re-runs the stage, pauses there again, and continue goes to the synthesis', async () => {
    const { id, version } = await pausedAtCheckpoint('Modify: drop the rest', ['c', 'd']);
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Result of b, final.'));
    const modified = await act(id, 'modify', {
      feedback: 'That is enough',
      plan: { stages: [] },
      version,
    });
    expect(modified.statusCode, modified.body).toBe(202);
    const again = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
    expect(again).toMatchObject({ awaitingReason: 'checkpoint' });
    const view = await pipelineOf(id);
    expect(view).toMatchObject({ revision: 2, next: 'await_review', currentStageId: 'b' });
    expect(view.stages.map((s: { id: string }) => s.id)).toEqual(['a', 'b']);

    h.provider.enqueue(answer('Answer from a and b.'));
    expect((await act(id, 'continue', { version: again.version })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Answer from a and b.' } });

    // The re-run of b with the feedback, then the synthesis over a and the new b.
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(2);
    expect(textOf(requests[0])).toContain('That is enough');
    expect(textOf(requests[1])).toContain('Result of b, final.');
    const events = await storedEvents(h.testApp, id);
    expect(events.findLast((event) => event.type === 'plan')?.detail).toMatchObject({
      revision: 2,
      source: 'modify',
      stages: [{ id: 'a' }, { id: 'b' }],
    });
    expect(events.filter((event) => event.step === 'c' || event.step === 'd')).toEqual([]);
    // The last continue began no stage: the synthesis came next.
    const lastReview = events.findLastIndex((event) => event.type === 'review');
    expect(events.slice(lastReview).filter((event) => event.type === 'stage')).toEqual([]);
  });

  it('after a failed stage: re-runs it and goes straight to the synthesis', async () => {
    h.provider.enqueue(
      planReply(
        stage('totals', { expectedOutput: { format: 'json', fields: ['total'] } }),
        stage('report'),
      ),
      answer('No JSON here.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Modify: add up, then stop',
      mode: 'complex',
    });
    const failed = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(failed).toMatchObject({ status: 'awaiting_input', awaitingReason: 'stage_failed' });

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('{"total": 7}'), answer('The total is 7.'));
    const modified = await act(id, 'modify', {
      feedback: 'Answer in JSON',
      plan: { stages: [] },
      version: failed.version,
    });
    expect(modified.statusCode, modified.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'The total is 7.' } });
    expect(h.provider.requests.length - before).toBe(2);
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { id: string; status: string }) => [s.id, s.status])).toEqual([
      ['totals', 'completed'],
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((event) => event.step === 'report')).toEqual([]);
  });
});
