import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  handOver,
  openWork,
  startWorkflow,
  storedEvents,
  takeOverToEnd,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A pipeline stage that does not end by itself: its workflow cancelled,
 * or its run handed over (as at a shutdown) and resumed by another. The
 * stage's attempt row and its events end alike, and a client reading the
 * events sees every call and stage it saw start end.
 */

const h = useToolLoopHarness();

const { act, pipelineOf } = pipelineRequests(() => h);

describe('a stage interrupted', () => {
  it('a cancel during a stage fails its attempt with the workflow: the view shows no stage running', async () => {
    h.provider.enqueue(planReply(stage('a'), stage('b')), { kind: 'stall' });
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Compare, then cancel',
      mode: 'complex',
    });
    await waitFor(async () => {
      // 404 until the plan is written.
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows/${id}/pipeline`,
        headers: bearer(h.tenant.key),
      });
      return response.statusCode === 200 && response.json().stages[0].status === 'running'
        ? true
        : undefined;
    }, 'stage a to run');
    expect((await act(id, 'cancel')).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual(['failed', 'pending']);
    expect(view.stages[0].attempts).toHaveLength(1);
    expect(view.stages[0].attempts[0]).toMatchObject({
      status: 'failed',
      error: { code: 'workflow_ended', message: 'The workflow was cancelled during this attempt' },
    });
    expect(view.stages[0].attempts[0].finishedAt).not.toBeNull();
    // The stream ends the stage it started, as the row says (and the model call, when it was written).
    const events = await storedEvents(h.testApp, id);
    expect(
      events.filter((e) => e.type === 'stage' || e.type === 'workflow_end').slice(-2),
    ).toMatchObject([
      {
        type: 'stage',
        step: 'a',
        status: 'failed',
        detail: {
          stage: 'a',
          title: 'Stage a',
          attempt: 1,
          error: {
            code: 'workflow_ended',
            message: 'The workflow was cancelled during this attempt',
          },
        },
      },
      { type: 'workflow_end', status: 'cancelled' },
    ]);
    expect(openWork(events)).toEqual([]);
  });

  it('handed over during a stage: the run taking over ends the attempt as interrupted, then runs the stage again', async () => {
    h.provider.enqueue(planReply(stage('a'), stage('b')), { kind: 'stall' });
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Compare, then hand over',
      mode: 'complex',
    });
    await waitFor(async () => {
      const events = await storedEvents(h.testApp, id);
      return events.some((e) => e.type === 'llm_call' && e.step === 'a/turn-1') ? true : undefined;
    }, 'stage a to call the model');
    await handOver(h.testApp, id);
    h.provider.enqueue(answer('Result of a.'), answer('Result of b.'), answer('Both done.'));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Both done.' } });

    const events = await storedEvents(h.testApp, id);
    const resumedAt = events.findIndex((e) => e.type === 'resumed');
    expect(events.slice(resumedAt - 2, resumedAt + 2)).toMatchObject([
      {
        type: 'llm_call',
        step: 'a/turn-1',
        status: 'failed',
        detail: { error: { code: 'interrupted' } },
      },
      {
        type: 'stage',
        step: 'a',
        status: 'failed',
        detail: {
          stage: 'a',
          attempt: 1,
          error: { code: 'interrupted', message: 'The run was cut off during this attempt' },
        },
      },
      { type: 'resumed', detail: { interruptedCalls: 1 } },
      { type: 'stage', step: 'a', status: 'started', detail: { attempt: 2, reason: 'resumed' } },
    ]);
    expect(openWork(events)).toEqual([]);
    const view = await pipelineOf(id);
    expect(view.stages[0].attempts.map((a: { status: string }) => a.status)).toEqual([
      'failed',
      'completed',
    ]);
    expect(view.stages[0].attempts[0].error).toEqual({
      code: 'interrupted',
      message: 'The run was cut off during this attempt',
    });
  });
});
