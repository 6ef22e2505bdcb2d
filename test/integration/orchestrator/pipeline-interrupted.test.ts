import { describe, expect, it } from 'vitest';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  handOver,
  openWork,
  storedEvents,
  takeOverToEnd,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A pipeline stage that does not end by itself: its workflow cancelled,
 * or its run handed over (as at a shutdown) and resumed by another. The
 * stage's attempt row and its events end alike, and a client reading the
 * events sees every call and stage it saw start end.
 */

const h = useToolLoopHarness();

const { act, pipelineOf, stalledAt } = pipelineRequests(() => h);

/** A complex workflow (stages a and b) stalled in stage a's model call. */
const stalledInStageA = (input: string) =>
  stalledAt(input, [planReply(stage('a'), stage('b'))], 'a/turn-1');

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
