import { describe, expect, it } from 'vitest';
import { planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * An answer whose turn ended at the model's output limit (finish reason
 * `length`) completes the workflow as far as it got, with a `warning`
 * `answer_cut_off` before the answer, so that a client can tell it stops
 * mid-way; an answer that ended by itself gets none.
 */

const h = useToolLoopHarness();

async function runToEnd(input: string, body: Record<string, unknown> = {}) {
  const id = await startWorkflow(h.testApp, h.tenant.key, { input, ...body });
  const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
  return { workflow, events: await storedEvents(h.testApp, id) };
}

describe('an answer cut off at the model’s output limit', () => {
  for (const model of ['gpt', 'claude']) {
    it(`completes with what it got and a warning answer_cut_off (${model})`, async () => {
      h.provider.enqueue({ kind: 'reply', text: 'The first half of', finish: 'length' });
      const { workflow, events } = await runToEnd(`Cut off (${model})`, { model, mode: 'simple' });
      expect(workflow).toMatchObject({ status: 'completed' });
      expect(JSON.stringify(workflow.result)).toContain('The first half of');
      const warnings = events.filter((event) => event.type === 'warning');
      expect(warnings).toHaveLength(1);
      expect(warnings[0]?.detail).toMatchObject({ code: 'answer_cut_off', model });
      const answerAt = events.findIndex((event) => event.type === 'answer');
      expect(events.indexOf(warnings[0] as (typeof events)[number])).toBeLessThan(answerAt);
    });
  }

  it('from the pipeline’s synthesis, the same warning, its step the synthesis', async () => {
    h.provider.enqueue(planReply(stage('a')), answer('Result of a.'), {
      kind: 'reply',
      text: 'A synthesis that stops',
      finish: 'length',
    });
    const { workflow, events } = await runToEnd('Cut-off synthesis', { mode: 'complex' });
    expect(workflow).toMatchObject({ status: 'completed' });
    expect(
      events
        .filter((event) => event.type === 'warning')
        .map((event) => [event.step, event.detail.code]),
    ).toEqual([['synthesis', 'answer_cut_off']]);
  });

  it('a stage cut off at the output limit is no answer cut off: a whole synthesis gets no warning', async () => {
    h.provider.enqueue(
      planReply(stage('a')),
      { kind: 'reply', text: 'A stage result that stops', finish: 'length' },
      answer('A whole synthesis.'),
    );
    const { workflow, events } = await runToEnd('Cut-off stage', { mode: 'complex' });
    expect(workflow).toMatchObject({ status: 'completed' });
    const stageCall = events.find(
      (event) =>
        event.type === 'llm_call' && event.step?.startsWith('a/') && event.status === 'completed',
    );
    // The stage's own call says it hit the limit; the workflow's answer did not.
    expect(stageCall?.detail).toMatchObject({ finishReason: 'length' });
    expect(events.filter((event) => event.type === 'warning')).toEqual([]);
  });

  it('an answer that ended by itself gets no warning', async () => {
    h.provider.enqueue(answer('Whole.'));
    const { events } = await runToEnd('Whole answer', { mode: 'simple' });
    expect(events.some((event) => event.type === 'warning')).toBe(false);
  });
});
