import { describe, expect, it } from 'vitest';
import { loadPipelineRows } from '../../../src/store/pipeline-rows.js';
import { bearer } from '../../support/app.js';
import { planReply, stage } from '../../support/pipeline-http.js';
import { hangingReply } from '../../support/replica-cluster.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  eventStored,
  expireLease,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * Every take of a workflow's lease names an owner of its own, not the
 * replica's id: a run that lost its lease stays refused even when a
 * review on its own replica takes the lease back for a new run there.
 * Owned by the replica id, the stale run would pass every lease check
 * again, carry on from its stale state beside the review's run, and its
 * release of the lease would release the new run's.
 */

const h = useToolLoopHarness();

describe('a stale run whose replica takes its workflow’s lease back through a review', () => {
  it('writes nothing more: the review’s run alone runs the attempt the review began', async () => {
    const db = h.testApp.services.database.db;
    const b = await h.startReplica({});
    const stale = hangingReply(['Stale result ', 'of a.']);
    h.provider.enqueue(planReply(stage('a', { checkpoint: true }), stage('b')), stale.reply);
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Take the lease back',
      mode: 'complex',
    });
    await stale.started;
    await eventStored(h.testApp, id, { type: 'llm_call', step: 'a/turn-1' });

    // A stalls in stage a past its lease; B takes over, runs a again and pauses at its checkpoint.
    await expireLease(h.testApp, id);
    h.provider.enqueue(answer('Fresh result of a.'));
    expect((await b.services.reclaimer.sweepOnce()).map((w) => w.id)).toContain(id);
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });

    // The user's continue reaches A (the load balancer's pick): its run waits for the stale one.
    const continued = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/continue`,
      headers: bearer(h.tenant.key),
      payload: { version: paused.version },
    });
    expect(continued.statusCode, continued.body).toBe(202);
    const reviewSeq = (await storedEvents(h.testApp, id)).find((e) => e.type === 'review')?.seq;
    expect(reviewSeq).toBeDefined();

    // Then the stale run's model call returns.
    h.provider.enqueue(answer('Result of b.'), answer('Final answer.'));
    stale.release();
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done.status).toBe('completed');

    const events = await storedEvents(h.testApp, id);
    const summary = events
      .map((e) => `${e.seq} ${e.type}/${e.step ?? '-'}/${e.status} ${JSON.stringify(e.detail)}`)
      .join('\n');
    const stagesAfterReview = events
      .filter((e) => e.seq > (reviewSeq ?? 0) && e.type === 'stage')
      .map((e) => `${e.step}/${String(e.detail.attempt)}:${e.status}`);
    expect(stagesAfterReview, summary).toEqual(['b/1:started', 'b/1:completed']);
    const { attempts } = await loadPipelineRows(db, { tenantId: h.tenant.id, workflowId: id });
    expect(attempts.map((a) => `${a.stageId}/${a.attempt}:${a.status}`).sort()).toEqual([
      'a/1:failed',
      'a/2:completed',
      'b/1:completed',
    ]);
  });
});
