import { describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, systemTextOf, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * README (Budgets): once the token cap is reached "no further stage runs and
 * no checkpoint pauses: ... the synthesis writes the answer from the stages
 * done". A checkpoint stage whose own (passing) result spent the budget is
 * done (the view shows it `completed`), so its result must reach the
 * synthesis. Every fake turn counts 15 tokens: planner + a + b = 45.
 */
const h = useToolLoopHarness();
const { pipelineOf } = pipelineRequests(() => h);

function textOf(request: RecordedRequest): string {
  return `${systemTextOf(request)}\n${JSON.stringify(request.body.messages)}`;
}

describe('a budget spent by a checkpoint stage', () => {
  it('the synthesis still gets that stage’s result', async () => {
    const before = h.provider.requests.length;
    h.provider.enqueue(
      planReply(stage('a'), stage('b', { checkpoint: true }), stage('c')),
      answer('Result of a.'),
      answer('Result of b: the key figure is 42.'),
      answer('Final answer.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Budget spent at a checkpoint',
      mode: 'complex',
      budget: { maxTokens: 45 },
    });
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, [
      'completed',
      'failed',
      'awaiting_input',
    ]);
    expect(workflow).toMatchObject({ status: 'completed', result: { reason: 'token_budget' } });
    const view = await pipelineOf(id);
    expect(view.stages.map((s: { status: string }) => s.status)).toEqual([
      'completed',
      'completed',
      'skipped',
    ]);
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(4);
    const synthesis = textOf(requests[3] as RecordedRequest);
    expect(synthesis).toContain('Result of a.');
    expect(synthesis).toContain('the key figure is 42');
    expect(synthesis).not.toMatch(/produced no result: b\b/);
  });
});
