import { describe, expect, it } from 'vitest';
import type { FakeResponse } from '../../fakes/provider-types.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitFor, waitForStatus } from '../../support/workflows.js';

/**
 * A pipeline whose token budget is spent and whose synthesis then fails,
 * retried until it answers: the `warning` naming the cap comes once per
 * workflow, from the run that reached it, however many retries follow.
 * Every turn of the fake counts 15 tokens (10 in, 5 out), an empty answer too.
 */

const h = useToolLoopHarness();
const { act, pipelineOf } = pipelineRequests(() => h);

/** Starts the workflow; resolves once it pauses on its first failed synthesis. */
async function startPaused(input: string, maxTokens: number, replies: FakeResponse[]) {
  h.provider.enqueue(...replies);
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input,
    mode: 'complex',
    budget: { maxTokens },
  });
  const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
    'awaiting_input',
    'failed',
    'completed',
  ]);
  expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'synthesis_failed' });
  return id;
}

/** Retries the synthesis, which fails again (no text); resolves once it has paused again. */
async function retryFailing(id: string, failures: number) {
  h.provider.enqueue(answer(''));
  expect((await act(id, 'retry')).statusCode).toBe(202);
  await waitFor(async () => {
    const events = await storedEvents(h.testApp, id);
    const paused = events.filter((e) => e.type === 'synthesis_failed').length === failures;
    return paused && events.at(-1)?.type === 'usage' ? true : undefined;
  }, `synthesis failure ${failures}`);
}

async function retryAnswering(id: string, text: string) {
  h.provider.enqueue(answer(text));
  expect((await act(id, 'retry')).statusCode).toBe(202);
  return waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
}

const capWarnings = async (id: string) =>
  (await storedEvents(h.testApp, id)).filter(
    (e) => e.type === 'warning' && e.detail.code === 'token_budget',
  );

describe('a budget’s warning and a retried synthesis', () => {
  it('reached by a stage: warned once, not again on each retry of the synthesis', async () => {
    // The planner's 15 tokens and stage a's 15 reach the cap of 30; b and c never run.
    const id = await startPaused('Budget spent, synthesis retried', 30, [
      planReply(stage('a'), stage('b', { checkpoint: true }), stage('c')),
      answer('Result of a.'),
      answer(''),
    ]);
    expect(await capWarnings(id)).toHaveLength(1);
    expect(await pipelineOf(id)).toMatchObject({ next: 'synthesis_failed', currentStageId: null });
    expect((await pipelineOf(id)).stages.map((s: { status: string }) => s.status)).toEqual([
      'completed',
      'skipped',
      'skipped',
    ]);

    await retryFailing(id, 2);
    const done = await retryAnswering(id, 'Answer from a alone.');
    expect(done).toMatchObject({
      status: 'completed',
      result: { answer: 'Answer from a alone.', reason: 'token_budget' },
    });
    const warnings = await capWarnings(id);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.detail).toMatchObject({ maxTokens: 30, tokens: 30 });
  });

  it('reached by the failed synthesis itself: warned with its pause, and not again on the retries', async () => {
    // Planner, a and b: 45 tokens of 50; the synthesis's empty answer brings them to 60.
    const id = await startPaused('Budget spent by the synthesis', 50, [
      planReply(stage('a'), stage('b')),
      answer('Result of a.'),
      answer('Result of b.'),
      answer(''),
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(events.slice(-4).map((e) => `${e.type}:${e.step}:${e.status}`)).toEqual([
      'llm_call:synthesis:completed',
      'warning:null:info',
      'synthesis_failed:synthesis:paused',
      'usage:null:info',
    ]);
    expect(events.at(-3)?.detail).toMatchObject({
      code: 'token_budget',
      maxTokens: 50,
      tokens: 60,
      message: expect.stringContaining('retry'),
    });

    await retryFailing(id, 2);
    const done = await retryAnswering(id, 'Answer at last.');
    expect(done).toMatchObject({
      status: 'completed',
      result: { answer: 'Answer at last.', reason: 'token_budget' },
    });
    expect(await capWarnings(id)).toHaveLength(1);
  });
});
