import { describe, expect, it } from 'vitest';
import { loadPipelineRows } from '../../../src/store/pipeline-rows.js';
import { planReply, stage } from '../../support/pipeline-http.js';
import { hangingReply } from '../../support/replica-cluster.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  claimAs,
  eventStored,
  expireLease,
  openWork,
  runStopped,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A run that lost its workflow's lease mid-stage (it stalled, and another
 * replica's sweep took the workflow over) writes no stage attempt more:
 * neither the end of the attempt it was running nor the start of the next
 * one. Its events were refused already; a stage result it still wrote
 * would stand in for the stage, which the run that took over would then
 * never run.
 */

const h = useToolLoopHarness();

/** The stage attempts as `<stage>/<attempt>:<status>`. */
async function attemptsOf(id: string): Promise<string[]> {
  const { attempts } = await loadPipelineRows(h.testApp.services.database.db, {
    tenantId: h.tenant.id,
    workflowId: id,
  });
  return attempts.map((a) => `${a.stageId}/${a.attempt}:${a.status}`).sort();
}

/**
 * A complex workflow planned as stages a and b whose run here stalls in
 * stage a's model call past its lease; a sweep by `owner`, which runs
 * nothing, takes it over. `release` lets the stalled call answer.
 */
async function stalledInStageA(input: string, owner: string) {
  const stageA = hangingReply(['Stale result ', 'of a.']);
  h.provider.enqueue(planReply(stage('a'), stage('b')), stageA.reply);
  const id = await startWorkflow(h.testApp, h.tenant.key, { input, mode: 'complex' });
  await stageA.started;
  await eventStored(h.testApp, id, { type: 'llm_call', step: 'a/turn-1' });
  await expireLease(h.testApp, id);
  await claimAs(h.testApp, id, owner);
  expect(await attemptsOf(id)).toEqual(['a/1:started']);
  return { id, release: stageA.release };
}

describe('a run that lost its lease mid-stage', () => {
  it('ends no attempt and starts none once another replica took the workflow over', async () => {
    const { id, release } = await stalledInStageA('Stall in a', 'other-replica');

    release();
    await runStopped(h.testApp, id);

    // The pipeline as the new owner took it over, and the lease still its.
    expect(await attemptsOf(id)).toEqual(['a/1:started']);
    const { rows } = await h.testApp.services.database.pool.query(
      'SELECT lease_owner FROM workflows WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ lease_owner: 'other-replica' });
  });

  it('leaves stage a to the run that resumes the workflow: a runs again as attempt 2, then b', async () => {
    const b = await h.startReplica({});
    const { id, release } = await stalledInStageA('Stall in a, resumed', 'dead-replica');
    release();
    await runStopped(h.testApp, id);

    // The replica that claimed it died too; B's sweep resumes it.
    await expireLease(h.testApp, id);
    h.provider.enqueue(answer('Fresh a.'), answer('Fresh b.'), answer('Done.'));
    expect((await b.services.reclaimer.sweepOnce()).map((w) => w.id)).toContain(id);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done.status).toBe('completed');

    const events = await storedEvents(h.testApp, id);
    const summary = events
      .map((e) => `${e.seq} ${e.type}/${e.step ?? '-'}/${e.status} ${JSON.stringify(e.detail)}`)
      .join('\n');
    expect(openWork(events), summary).toEqual([]);
    const stageStarts = events
      .filter((e) => e.type === 'stage' && e.status === 'started')
      .map((e) => `${e.step}/${String(e.detail.attempt)}/${String(e.detail.reason)}`);
    expect(stageStarts, summary).toEqual(['a/1/first', 'a/2/resumed', 'b/1/first']);
    const { attempts } = await loadPipelineRows(h.testApp.services.database.db, {
      tenantId: h.tenant.id,
      workflowId: id,
    });
    expect(
      attempts.map((a) => ({ stage: a.stageId, attempt: a.attempt, result: a.result })),
    ).toEqual(
      expect.arrayContaining([
        { stage: 'a', attempt: 1, result: null },
        { stage: 'a', attempt: 2, result: 'Fresh a.' },
        { stage: 'b', attempt: 1, result: 'Fresh b.' },
      ]),
    );
    expect(attempts).toHaveLength(3);
  });
});
