import { describe, expect, it } from 'vitest';
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

/**
 * Starts a complex workflow (stages a and b) whose stage a's model call
 * stalls, and resolves once stage a is calling the model: its request
 * received by the fake (the planner's came first) and its `llm_call` event
 * stored, and with it the stage's row and `started` event, written before.
 */
async function stalledInStageA(input: string): Promise<string> {
  const before = h.provider.requests.length;
  h.provider.enqueue(planReply(stage('a'), stage('b')), { kind: 'stall' });
  const id = await startWorkflow(h.testApp, h.tenant.key, { input, mode: 'complex' });
  await waitFor(async () => {
    const events = await storedEvents(h.testApp, id);
    return h.provider.requests.length >= before + 2 &&
      events.some((e) => e.type === 'llm_call' && e.step === 'a/turn-1')
      ? true
      : undefined;
  }, 'stage a to call the model');
  return id;
}

describe('a stage interrupted', () => {
  it('a cancel during a stage fails its attempt with the workflow: the view shows no stage running', async () => {
    const id = await stalledInStageA('Compare, then cancel');
    expect((await act(id, 'cancel')).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual(['failed', 'skipped']);
    expect(view).toMatchObject({ next: 'none', currentStageId: null });
    expect(view.stages[0].attempts).toHaveLength(1);
    expect(view.stages[0].attempts[0]).toMatchObject({
      status: 'failed',
      error: { code: 'workflow_ended', message: 'The workflow was cancelled during this attempt' },
    });
    expect(view.stages[0].attempts[0].finishedAt).not.toBeNull();
    // The stream ends what it started: the model call, then the stage, as its row says.
    const events = await storedEvents(h.testApp, id);
    expect(events.slice(-4)).toMatchObject([
      {
        type: 'llm_call',
        step: 'a/turn-1',
        status: 'failed',
        detail: { error: { code: 'cancelled' } },
      },
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
      // The planner's turn, which the cancelled run never counted.
      { type: 'usage', detail: { inputTokens: 10, outputTokens: 5 } },
      { type: 'workflow_end', status: 'cancelled' },
    ]);
    expect(openWork(events)).toEqual([]);
  });

  it('handed over during a stage: the run taking over ends the attempt as interrupted, then runs the stage again', async () => {
    const id = await stalledInStageA('Compare, then hand over');
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
