import { describe, expect, it } from 'vitest';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A token or cost budget spent in a pipeline: whatever spent it (the
 * planner, a stage's last turn), nothing more runs or pauses; a warning
 * names the cap, the synthesis writes the answer from the stages done, and
 * the pipeline view shows the rest skipped. Every turn of the fake counts
 * 15 tokens (10 in, 5 out).
 */

const h = useToolLoopHarness();
const { pipelineOf } = pipelineRequests(() => h);

async function runWithTokenCap(question: string, maxTokens: number, replies: string[]) {
  const before = h.provider.requests.length;
  h.provider.enqueue(
    planReply(stage('a'), stage('b', { checkpoint: true }), stage('c')),
    ...replies.map(answer),
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input: question,
    mode: 'complex',
    budget: { maxTokens },
  });
  const workflow = await waitForStatus(h.testApp, h.tenant.key, id, [
    'completed',
    'failed',
    'awaiting_input',
  ]);
  return {
    id,
    workflow,
    events: await storedEvents(h.testApp, id),
    requests: h.provider.requests.length - before,
  };
}

describe('a pipeline’s budget', () => {
  it('spent by a stage’s last turn: no later stage runs or pauses; the answer comes from the stages done', async () => {
    // The planner's 15 tokens and stage a's 15 reach the cap of 30.
    const { id, workflow, events, requests } = await runWithTokenCap(
      'Budget spent by stage a',
      30,
      ['Result of a.', 'Answer from a alone.'],
    );
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answer from a alone.', reason: 'token_budget' },
      usage: { inputTokens: 30, outputTokens: 15 },
    });
    // Planner, a, synthesis: b ran no turn and c none.
    expect(requests).toBe(3);
    expect(events.filter((event) => event.type === 'warning').map((event) => event.detail)).toEqual(
      [
        expect.objectContaining({
          code: 'token_budget',
          maxTokens: 30,
          tokens: 30,
          message: expect.stringContaining('writing the answer from the stages done so far'),
        }),
      ],
    );
    expect(events.filter((event) => event.type === 'stage').map((event) => event.step)).toEqual([
      'a',
      'a',
    ]);
    const view = await pipelineOf(id);
    expect(view).toMatchObject({ next: 'none', currentStageId: null });
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual([
      'completed',
      'skipped',
      'skipped',
    ]);
  });

  it('spent by the planner: no stage runs, and the synthesis answers from the question alone', async () => {
    const { id, workflow, requests } = await runWithTokenCap('Budget spent by the plan', 10, [
      'Answer without stages.',
    ]);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answer without stages.', reason: 'token_budget' },
    });
    expect(requests).toBe(2);
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual([
      'skipped',
      'skipped',
      'skipped',
    ]);
  });

  it('within the budget, the pipeline pauses at its checkpoint as planned', async () => {
    const { id, workflow } = await runWithTokenCap('Budget not spent', 1000, [
      'Result of a.',
      'Result of b.',
    ]);
    expect(workflow).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });
    expect(await pipelineOf(id)).toMatchObject({ next: 'await_review', currentStageId: 'b' });
  });
});
