import { describe, expect, it } from 'vitest';
import type { FakeResponse } from '../../fakes/provider-types.js';
import { planReply, stage } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolChoiceOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';

/**
 * The classification's model check is a model call of the workflow: it
 * counts in the workflow's usage and, from the first turn on, against its
 * token and cost caps. It used to count in the usage only: the run's
 * budget checks began from zero, so a workflow whose check and first turn
 * had reached the cap was offered tools again, and ended further above
 * its cap than the turn that crossed it and the last turn. The check
 * (CLASSIFY_MODEL is the harness's `gpt`) uses 160 tokens here, every
 * other reply 120.
 */

const h = useToolLoopHarness({
  pricing: { input: 1000, output: 1000, cachedInput: 1000 },
  env: { CLASSIFY_WITH_MODEL: 'true', CLASSIFY_MODEL: 'gpt' },
});

const CHECK = { input: 150, output: 10 };
const TURN = { input: 100, output: 20 };

function using(response: FakeResponse, usage: { input: number; output: number }): FakeResponse {
  if (response.kind !== 'reply') throw new Error('only a reply reports usage');
  return { ...response, usage };
}

describe('the classification check against the budget', () => {
  it('tool loop: the check and the first turn reach the token cap, so the second turn has no tools', async () => {
    h.provider.enqueue(
      using(answer('simple'), CHECK),
      using(callsTo({ name: 'calculator', arguments: { expression: '1 + 1' } }), TURN),
      using(answer('Two.'), TURN),
    );
    // The check's 160 tokens and the first turn's 120 reach the cap of 250.
    const { workflow, events, requests } = await h.run('What is one plus one?', 'gpt', {
      budget: { maxTokens: 250 },
    });
    expect(requests).toHaveLength(3);
    expect(toolChoiceOf(requests[2])).toBe('none');
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Two.', reason: 'token_budget' },
      usage: { inputTokens: 350, outputTokens: 50 },
    });
    expect(events.filter((event) => event.type === 'warning').map((event) => event.detail)).toEqual(
      [expect.objectContaining({ code: 'token_budget', maxTokens: 250, tokens: 280 })],
    );
  });

  it('tool loop: the check counts against the cost cap too', async () => {
    h.provider.enqueue(
      using(answer('simple'), CHECK),
      using(callsTo({ name: 'calculator', arguments: { expression: '2 + 2' } }), TURN),
      using(answer('Four.'), TURN),
    );
    // $0.16 for the check and $0.12 for the first turn reach the cap of $0.25.
    const { workflow, requests } = await h.run('What is two plus two?', 'gpt', {
      budget: { maxCostUsd: 0.25 },
    });
    expect(toolChoiceOf(requests[2])).toBe('none');
    expect(workflow).toMatchObject({ result: { reason: 'cost_budget' } });
  });

  it('pipeline: the check and the planner reach the token cap, so no stage runs', async () => {
    h.provider.enqueue(
      using(answer('complex'), CHECK),
      using(planReply(stage('a'), stage('b')), TURN),
      using(answer('Answered without stages.'), TURN),
    );
    const { workflow, events, requests } = await h.run(
      'Gather the prices, then tabulate them',
      'gpt',
      { budget: { maxTokens: 250 } },
    );
    // Check, planner, synthesis: neither stage ran.
    expect(requests).toHaveLength(3);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answered without stages.', reason: 'token_budget' },
      usage: { inputTokens: 350, outputTokens: 50 },
    });
    expect(events.filter((event) => event.type === 'warning').map((event) => event.detail)).toEqual(
      [expect.objectContaining({ code: 'token_budget', maxTokens: 250, tokens: 280 })],
    );
  });
});
