import { describe, expect, it } from 'vitest';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';

/**
 * Workflows with the classification's model check on (CLASSIFY_MODEL is the
 * harness's `gpt`, so a workflow's first request is the check). The check
 * is a model call like any other: its usage and price are on the
 * `classification` event and in the workflow's usage. At $1,000 per
 * million tokens in and $2,000 out, each call of the fake (10 in, 5 out)
 * costs $0.02.
 */

const h = useToolLoopHarness({
  pricing: { input: 1000, output: 2000, cachedInput: 100 },
  env: { CLASSIFY_WITH_MODEL: 'true', CLASSIFY_MODEL: 'gpt' },
});

describe('the classification check’s usage', () => {
  it('is on the classification event and counted in the workflow’s usage', async () => {
    h.provider.enqueue(answer('simple'), answer('Paris.'));
    const { workflow, events, requests } = await h.run('What is the capital of France?');
    expect(requests).toHaveLength(2);
    expect(events.find((event) => event.type === 'classification')?.detail).toMatchObject({
      method: 'model',
      usage: { inputTokens: 10, outputTokens: 5, costUsd: 0.02 },
    });
    expect(workflow).toMatchObject({
      status: 'completed',
      usage: { inputTokens: 20, outputTokens: 10, costUsd: 0.04 },
    });
    expect(events.filter((event) => event.type === 'usage').map((event) => event.detail)).toEqual([
      expect.objectContaining({ inputTokens: 20, outputTokens: 10, costUsd: 0.04 }),
    ]);
  });
});

describe('classification event of an unusable model answer', () => {
  it('quotes an unusable answer whose 39th character is half of an emoji without breaking the workflow', async () => {
    // The reason shows the answer's first 39 UTF-16 units: here the cut falls
    // between the two halves of the emoji's surrogate pair.
    const prefix = 'Hard to say, it depends on what you me';
    expect(prefix).toHaveLength(38);
    h.provider.enqueue(answer(`${prefix}🤔 exactly by that`), answer('Paris.'));
    const { workflow, events } = await h.run('What is the capital of France?');
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Paris.' } });
    const classification = events.find((event) => event.type === 'classification');
    expect(classification?.detail).toMatchObject({ kind: 'simple', method: 'keywords' });
    const reason = String((classification?.detail as { reason?: string })?.reason);
    expect(reason.isWellFormed()).toBe(true);
  });
});
