import { describe, expect, it } from 'vitest';
import { planReply, stage } from '../../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A workflow never completes with an empty answer: an answering turn (the
 * tool loop's last, the pipeline's synthesis) with no text fails it with
 * `empty_answer` (the synthesis pauses for a retry with that error), or
 * `llm_content_filtered` when the provider's content filter ended the
 * turn. A stage's empty result is the validator's to retry, not a failure.
 */

const h = useToolLoopHarness();

async function runToEnd(input: string, body: Record<string, unknown> = {}) {
  const id = await startWorkflow(h.testApp, h.tenant.key, { input, ...body });
  const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
  return { id, workflow, events: await storedEvents(h.testApp, id) };
}

describe('an empty answer', () => {
  for (const model of ['gpt', 'claude']) {
    it(`after a tool call, fails the workflow with empty_answer (${model})`, async () => {
      h.provider.enqueue(
        callsTo({ name: 'calculator', arguments: { expression: '6 * 7' } }),
        answer('   '),
      );
      const { workflow, events } = await runToEnd(`Empty after a tool (${model})`, {
        model,
        mode: 'simple',
      });
      expect(workflow).toMatchObject({
        status: 'failed',
        error: { code: 'empty_answer', message: 'The model answered with no text' },
      });
      expect(workflow.result).toBeNull();
      expect(events.at(-1)).toMatchObject({
        type: 'workflow_end',
        status: 'failed',
        detail: { error: { code: 'empty_answer' } },
      });
      expect(events.some((event) => event.type === 'answer')).toBe(false);
    });

    it(`ended by the provider's content filter fails it with llm_content_filtered (${model})`, async () => {
      h.provider.enqueue({ kind: 'reply', text: '', finish: 'content_filter' });
      const { workflow } = await runToEnd(`Filtered (${model})`, { model, mode: 'simple' });
      expect(workflow).toMatchObject({
        status: 'failed',
        error: { code: 'llm_content_filtered' },
      });
    });
  }

  it('from the pipeline’s synthesis pauses it for a retry; an empty stage result is retried by the validator', async () => {
    h.provider.enqueue(planReply(stage('a')), answer(''), answer('Result of a.'), {
      kind: 'reply',
      text: '',
    });
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Empty synthesis',
      mode: 'complex',
    });
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    expect(workflow).toMatchObject({
      status: 'awaiting_input',
      awaitingReason: 'synthesis_failed',
    });
    const events = await storedEvents(h.testApp, id);
    expect(events.at(-2)).toMatchObject({
      type: 'synthesis_failed',
      detail: { error: { code: 'empty_answer' } },
    });
    const stageEvents = events
      .filter((event) => event.type === 'stage')
      .map((event) => `${event.status}:${event.detail.attempt}`);
    expect(stageEvents).toEqual(['started:1', 'failed:1', 'started:2', 'completed:2']);
    expect(
      events.find(
        (event) =>
          event.type === 'llm_call' && event.step === 'synthesis' && event.status === 'completed',
      )?.detail,
    ).toMatchObject({ finishReason: 'stop' });
  });
});
