import { describe, expect, it } from 'vitest';
import { planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  cancelWorkflow,
  eventStored,
  handOver,
  type StoredEvent,
  startWorkflow,
  storedEvents,
  takeOverToEnd,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * Each planning turn is a model call with its own `llm_call` events at
 * step `plan`, the end carrying its usage, as a stage's turns and the
 * synthesis do. The planner's usage used to reach the event log only with
 * the `plan` event, once planning was over: a run stopped while it
 * repaired a plan (a cancel, a hand-over, a lost lease) left the first
 * planning turn, paid for and in the usage ledger, out of the workflow's
 * usage. At $1,000 per million tokens, in and out.
 */

const h = useToolLoopHarness({ pricing: { input: 1000, output: 1000, cachedInput: 1000 } });

const FIRST = { input: 100, output: 20 };
const usd = (usage: { input: number; output: number }) =>
  ((usage.input + usage.output) * 1000) / 1_000_000;

/** Starts a complex workflow whose first plan is invalid and whose repair turn stalls; resolves once the first turn's end is stored. */
async function stalledInItsRepair(input: string): Promise<string> {
  const before = h.provider.requests.length;
  h.provider.enqueue({ kind: 'reply', text: 'No plan yet.', usage: FIRST }, { kind: 'stall' });
  const id = await startWorkflow(h.testApp, h.tenant.key, { input, mode: 'complex' });
  await waitFor(
    () => (h.provider.requests.length >= before + 2 ? true : undefined),
    'the repair turn to be asked',
  );
  await eventStored(h.testApp, id, { type: 'llm_call', step: 'plan' });
  await waitFor(
    async () => (plannerCalls(await storedEvents(h.testApp, id)).length >= 3 ? true : undefined),
    'the first planning turn’s end to be stored',
  );
  return id;
}

function plannerCalls(events: StoredEvent[]): StoredEvent[] {
  return events.filter((event) => event.type === 'llm_call' && event.step === 'plan');
}

describe('the planner’s turns', () => {
  it('a cancel during the repair turn: the first planning turn counts in the cancelled workflow’s usage', async () => {
    const id = await stalledInItsRepair('Compare two things, then cancel');
    const cancelled = await cancelWorkflow(h.testApp, h.tenant.key, id);
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    expect(done.usage).toMatchObject({ inputTokens: 100, outputTokens: 20, costUsd: usd(FIRST) });
    const events = await storedEvents(h.testApp, id);
    expect(plannerCalls(events).map((event) => [event.status, event.detail])).toEqual([
      ['started', { model: 'gpt' }],
      [
        'completed',
        {
          model: 'gpt',
          finishReason: 'stop',
          usage: { inputTokens: 100, outputTokens: 20, cachedInputTokens: 0, costUsd: usd(FIRST) },
        },
      ],
      ['started', { model: 'gpt', repair: true }],
      [
        'failed',
        expect.objectContaining({ error: expect.objectContaining({ code: 'cancelled' }) }),
      ],
    ]);
    expect(events.slice(-2)).toMatchObject([
      { type: 'usage', detail: { inputTokens: 100, outputTokens: 20 } },
      { type: 'workflow_end', status: 'cancelled' },
    ]);
  });

  it('a hand-over during the repair turn: the run taking over counts the first planning turn', async () => {
    const id = await stalledInItsRepair('Compare two things, then hand over');
    await handOver(h.testApp, id);
    // Planned anew, one stage, the synthesis: 3 × 15 tokens (the fake's default usage).
    h.provider.enqueue(planReply(stage('a')), answer('Result of a.'), answer('Done.'));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    expect(done).toMatchObject({
      status: 'completed',
      usage: { inputTokens: 130, outputTokens: 35 },
    });
    const events = await storedEvents(h.testApp, id);
    const ends = plannerCalls(events).filter((event) => event.status !== 'started');
    expect(ends.map((event) => [event.status, event.detail.usage])).toEqual([
      ['completed', expect.objectContaining({ inputTokens: 100, outputTokens: 20 })],
      ['failed', undefined],
      ['completed', expect.objectContaining({ inputTokens: 10, outputTokens: 5 })],
    ]);
    // The plan event sums nothing of its own: its turns' events carry their usage.
    expect(events.find((event) => event.type === 'plan')?.detail).not.toHaveProperty('usage');
  });
});
