import { describe, expect, it } from 'vitest';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';

/**
 * The model check of the classification is a model call like any other:
 * its usage and price are on the `classification` event and in the
 * workflow's usage. At $1,000 per million tokens in and $2,000 out, each
 * call of the fake (10 in, 5 out) costs $0.02.
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
