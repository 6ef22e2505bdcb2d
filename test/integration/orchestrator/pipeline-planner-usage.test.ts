import { describe, expect, it } from 'vitest';
import type { FakeResponse } from '../../fakes/provider-types.js';
import { useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A pipeline whose planner fails still pays for its turns: the tokens and
 * cost of every planning turn count in the workflow's usage, whether the
 * repaired reply is invalid too (plan_invalid) or the repair turn fails at
 * the provider. Both used to be dropped: the planner threw, and its turns'
 * usage went with the error. At $1,000 per million tokens, in and out.
 */

const h = useToolLoopHarness({ pricing: { input: 1000, output: 1000, cachedInput: 1000 } });

const FIRST = { input: 100, output: 20 };
const SECOND = { input: 300, output: 40 };
const usd = (tokens: number) => (tokens * 1000) / 1_000_000;

async function planFails(model: string, replies: FakeResponse[]) {
  h.provider.enqueue(...replies);
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input: `Plan for nothing on ${model}`,
    mode: 'complex',
    model,
  });
  const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
  expect(h.provider.pendingResponses()).toBe(0);
  return { workflow, events: await storedEvents(h.testApp, id) };
}

function planEvent(events: StoredEvent[]): StoredEvent | undefined {
  return events.find((event) => event.type === 'plan');
}

/** The usage of each planning turn's `llm_call` end, in order. */
function planningTurnUsage(events: StoredEvent[]): unknown[] {
  return events
    .filter((event) => event.type === 'llm_call' && event.step === 'plan')
    .filter((event) => event.status !== 'started')
    .map((event) => event.detail.usage);
}

describe('a pipeline whose planner fails', () => {
  it.each(['gpt', 'claude'])(
    'on %s, a plan invalid after its repair: both planning turns count in the usage and cost',
    async (model) => {
      const { workflow, events } = await planFails(model, [
        { kind: 'reply', text: 'No plan.', usage: FIRST },
        { kind: 'reply', text: 'Still no plan.', usage: SECOND },
      ]);
      const costUsd = usd(FIRST.input + FIRST.output + SECOND.input + SECOND.output);
      expect(workflow).toMatchObject({
        status: 'failed',
        error: { code: 'plan_invalid' },
        usage: { inputTokens: 400, outputTokens: 60 },
      });
      expect((workflow.usage as { costUsd: number }).costUsd).toBeCloseTo(costUsd, 8);
      // Each planning turn's llm_call carries its own: a run taking over a
      // workflow cut off after it would count them from there.
      expect(planEvent(events)).toMatchObject({
        status: 'failed',
        detail: { error: { code: 'plan_invalid' } },
      });
      expect(planningTurnUsage(events)).toEqual([
        expect.objectContaining({ inputTokens: 100, outputTokens: 20 }),
        expect.objectContaining({ inputTokens: 300, outputTokens: 40 }),
      ]);
      const usage = events.filter((event) => event.type === 'usage');
      expect(usage.map((event) => event.detail)).toMatchObject([
        { inputTokens: 400, outputTokens: 60 },
      ]);
    },
  );

  it.each(['gpt', 'claude'])(
    'on %s, a repair turn failing at the provider: the first turn still counts',
    async (model) => {
      const { workflow, events } = await planFails(model, [
        { kind: 'reply', text: 'No plan.', usage: FIRST },
        { kind: 'error', status: 400 },
      ]);
      expect(workflow).toMatchObject({
        status: 'failed',
        error: { code: 'llm_invalid_request' },
        usage: { inputTokens: 100, outputTokens: 20 },
      });
      expect((workflow.usage as { costUsd: number }).costUsd).toBeCloseTo(
        usd(FIRST.input + FIRST.output),
        8,
      );
      expect(planEvent(events)).toMatchObject({ status: 'failed' });
      expect(planningTurnUsage(events)).toEqual([
        expect.objectContaining({ inputTokens: 100, outputTokens: 20 }),
        undefined,
      ]);
    },
  );
});
