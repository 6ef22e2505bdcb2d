import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  getWorkflow,
  startWorkflow,
  storedEvents,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A pipeline whose synthesis fails (the model's error after the router's
 * retries, or no text) pauses (awaiting_input, synthesis_failed) with its
 * stages' results kept; `retry` runs the synthesis alone, and nothing else
 * resumes that pause.
 */

const h = useToolLoopHarness();
const { act, pipelineOf } = pipelineRequests(() => h);

const PAUSES = ['awaiting_input', 'failed', 'completed'];

/** A two-stage pipeline whose synthesis gets `synthesis`; resolves once the workflow stops. */
async function failedSynthesis(input: string, body: Record<string, unknown>) {
  h.provider.enqueue(
    planReply(stage('a'), stage('b')),
    answer('Result of a.'),
    answer('Result of b.'),
    body.synthesis as Parameters<typeof h.provider.enqueue>[0],
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input,
    mode: 'complex',
    ...(body.model ? { model: body.model } : {}),
  });
  return { id, workflow: await waitForStatus(h.testApp, h.tenant.key, id, PAUSES) };
}

describe('a failed synthesis', () => {
  for (const model of ['gpt', 'claude']) {
    it(`pauses synthesis_failed; retry runs the synthesis alone and completes (${model})`, async () => {
      const { id, workflow } = await failedSynthesis(`Synthesis fails (${model})`, {
        model,
        synthesis: { kind: 'error', status: 400 },
      });
      expect(workflow).toMatchObject({
        status: 'awaiting_input',
        awaitingReason: 'synthesis_failed',
        error: null,
        result: null,
      });
      const paused = await storedEvents(h.testApp, id);
      expect(paused.slice(-3).map((e) => `${e.type}:${e.step}:${e.status}`)).toEqual([
        'llm_call:synthesis:failed',
        'synthesis_failed:synthesis:paused',
        'usage:null:info',
      ]);
      expect(paused.at(-2)?.detail).toMatchObject({ error: { code: 'llm_invalid_request' } });
      expect(paused.some((e) => e.type === 'workflow_end')).toBe(false);
      // The stages stay done: the view has their results.
      const view = await pipelineOf(id);
      expect(view.stages.map((s: { status: string }) => s.status)).toEqual([
        'completed',
        'completed',
      ]);

      // A stage review or an answer does not resume it.
      for (const action of ['continue', 'answer'] as const) {
        const refused = await act(id, action, action === 'answer' ? { answer: 'yes' } : {});
        expect(refused.statusCode, refused.body).toBe(409);
        expect(refused.json()).toMatchObject({
          code: 'not_awaiting_input',
          current: { awaitingReason: 'synthesis_failed' },
        });
      }
      const modified = await act(id, 'modify', { feedback: 'Shorter' });
      expect(modified.statusCode, modified.body).toBe(409);
      expect(modified.json()).toMatchObject({ code: 'not_awaiting_input' });
      const stale = await act(id, 'retry', { version: workflow.version - 1 });
      expect(stale.statusCode, stale.body).toBe(409);
      expect(stale.json()).toMatchObject({ code: 'stale_version' });

      const before = h.provider.requests.length;
      h.provider.enqueue(answer('The final answer.'));
      const retried = await act(id, 'retry', {}, { 'if-match': `"${workflow.version}"` });
      expect(retried.statusCode, retried.body).toBe(202);
      expect(retried.json()).toMatchObject({ status: 'running', awaitingReason: null });
      const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
      expect(done).toMatchObject({ status: 'completed', result: { answer: 'The final answer.' } });
      // The synthesis alone ran again: no stage, no plan.
      expect(h.provider.requests.length - before).toBe(1);

      const events = await storedEvents(h.testApp, id);
      expect(events.map((e) => e.seq)).toEqual(events.map((_, index) => index + 1));
      const after = events.slice(paused.length);
      expect(after.map((e) => `${e.type}:${e.step}:${e.status}`)).toEqual([
        'review:synthesis:completed',
        'llm_call:synthesis:started',
        'llm_call:synthesis:completed',
        'answer:null:completed',
        'usage:null:info',
        'workflow_end:null:completed',
      ]);
      expect(after[0]?.detail).toEqual({ action: 'retry' });
      expect(events.filter((e) => e.type === 'stage' && e.status === 'started')).toHaveLength(2);

      const trace = await h.testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows/${id}/trace`,
        headers: bearer(h.tenant.key),
      });
      expect(trace.statusCode, trace.body).toBe(200);
      const wait = trace.json().spans.find((span: { kind: string }) => span.kind === 'wait');
      expect(wait).toMatchObject({
        name: 'synthesis_failed',
        status: 'completed',
        startSeq: paused.at(-2)?.seq,
        endSeq: after[0]?.seq,
      });
    });
  }

  it('with no text pauses too, and can fail again before it is answered', async () => {
    const { id, workflow } = await failedSynthesis('Synthesis says nothing', {
      synthesis: answer(''),
    });
    expect(workflow).toMatchObject({
      status: 'awaiting_input',
      awaitingReason: 'synthesis_failed',
    });
    expect((await storedEvents(h.testApp, id)).at(-2)).toMatchObject({
      type: 'synthesis_failed',
      detail: { error: { code: 'empty_answer' } },
    });

    h.provider.enqueue({ kind: 'error', status: 400 });
    expect((await act(id, 'retry')).statusCode).toBe(202);
    await waitFor(async () => {
      const events = await storedEvents(h.testApp, id);
      return events.filter((e) => e.type === 'synthesis_failed').length === 2 ? true : undefined;
    }, 'the retried synthesis to fail');
    const again = await getWorkflow(h.testApp, h.tenant.key, id);
    expect(again).toMatchObject({ status: 'awaiting_input', awaitingReason: 'synthesis_failed' });

    h.provider.enqueue(answer('Said at last.'));
    expect((await act(id, 'retry')).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Said at last.' } });
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((e) => e.type === 'synthesis_failed')).toHaveLength(2);
    expect(events.filter((e) => e.type === 'review')).toHaveLength(2);
  });

  it('the pipeline view says synthesis_failed, not synthesize: nothing runs until a retry', async () => {
    const { id } = await failedSynthesis('Synthesis fails, then the view', {
      synthesis: { kind: 'error', status: 400 },
    });
    expect(await pipelineOf(id)).toMatchObject({ next: 'synthesis_failed', currentStageId: null });

    h.provider.enqueue(answer('Answered on retry.'));
    expect((await act(id, 'retry')).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(await pipelineOf(id)).toMatchObject({ next: 'none', currentStageId: null });
  });

  it('cancel ends a workflow waiting for its retry', async () => {
    const { id } = await failedSynthesis('Synthesis fails, then cancel', {
      synthesis: { kind: 'error', status: 400 },
    });
    const cancelled = await act(id, 'cancel');
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    const ended = await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    expect(ended.status).toBe('cancelled');
  });
});
