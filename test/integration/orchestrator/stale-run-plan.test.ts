import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { hangingReply } from '../../support/replica-cluster.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  eventStored,
  expireLease,
  runStopped,
  startWorkflow,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A run that lost its workflow's lease in the planner saves no plan. While
 * it stalled, another replica took the workflow over, planned, ran and
 * paused at a checkpoint; a plan the stale run saved then would be the
 * latest revision, one the paused stage is not in, and every review of the
 * pause would be refused.
 */

const h = useToolLoopHarness();
const { pipelineOf } = pipelineRequests(() => h);

describe('a run that lost its lease in the planner', () => {
  it('saves no plan: the plan of the replica that took over stays current, and its pause can be reviewed', async () => {
    const b = await h.startReplica({});
    const stalePlan = JSON.stringify({ stages: [stage('a'), stage('b')] });
    const planner = hangingReply([stalePlan.slice(0, 10), stalePlan.slice(10)]);
    h.provider.enqueue(planner.reply);
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Plan, stall, be taken over',
      mode: 'complex',
    });
    await planner.started;
    await eventStored(h.testApp, id, { type: 'workflow_start' });

    // A stalls past its lease; B's sweep takes the workflow over, plans x, runs it and pauses there.
    await expireLease(h.testApp, id);
    h.provider.enqueue(planReply(stage('x', { checkpoint: true })), answer('Result of x.'));
    expect((await b.services.reclaimer.sweepOnce()).map((w) => w.id)).toContain(id);
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });

    // A's planner call answers now.
    planner.release();
    await runStopped(h.testApp, id);
    const view = await pipelineOf(id);
    expect({
      revision: view.revision,
      stages: view.stages.map((s: { id: string }) => s.id),
      next: view.next,
    }).toEqual({ revision: 1, stages: ['x'], next: 'await_review' });

    h.provider.enqueue(answer('Final.'));
    const continued = await b.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/continue`,
      headers: bearer(h.tenant.key),
      payload: { version: paused.version },
    });
    expect(continued.statusCode, continued.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Final.' } });
  });
});
