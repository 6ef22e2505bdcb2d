import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.js';
import { catalogueSchema, costOf, defaultCatalogue } from '../../../src/llm/catalogue.js';

describe('catalogue', () => {
  it('without keys the default catalogue is the offline scripted model', () => {
    const catalogue = defaultCatalogue({ openai: false, anthropic: false });
    expect(catalogue.defaultModel).toBe('scripted');
    expect(catalogue.providers).toEqual([{ name: 'scripted', kind: 'scripted' }]);
  });

  it('with both keys each vendor falls back to the other', () => {
    const catalogue = defaultCatalogue({ openai: true, anthropic: true });
    expect(catalogue.models.find((m) => m.name === 'gpt-4o-mini')?.fallbacks).toEqual([
      'claude-haiku-4-5',
    ]);
    expect(catalogueSchema.safeParse(catalogue).success).toBe(true);
    expect(catalogue.models.some((m) => m.provider === 'scripted')).toBe(false);
  });

  it('rejects references to unknown providers and models', () => {
    const result = catalogueSchema.safeParse({
      providers: [{ name: 'openai', kind: 'openai' }],
      models: [
        {
          name: 'a',
          provider: 'nope',
          modelId: 'a',
          contextWindow: 1,
          maxOutputTokens: 1,
          fallbacks: ['b'],
        },
      ],
      defaultModel: 'c',
    });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((issue) => issue.message)).toEqual([
      'unknown provider "nope"',
      'unknown model "b"',
      'unknown model "c"',
    ]);
  });

  it('prices cached and uncached input, cache writes and output separately', () => {
    const [entry] = defaultCatalogue({ openai: false, anthropic: true }).models;
    if (!entry) throw new Error('no model');
    // claude-haiku-4-5: input 1, output 5, cached 0.1, cache write 1.25 per million
    const cost = costOf(entry, {
      inputTokens: 1_000_000,
      cachedInputTokens: 500_000,
      cacheWriteTokens: 100_000,
      outputTokens: 200_000,
    });
    expect(cost).toBeCloseTo(0.4 * 1 + 0.5 * 0.1 + 0.1 * 1.25 + 0.2 * 5, 10);
  });

  it('WAYMARK_MODELS is parsed and validated at start, one line per problem', () => {
    const config = loadConfig({
      WAYMARK_MODELS: JSON.stringify({
        providers: [{ name: 'ollama', kind: 'openai', baseUrl: 'http://127.0.0.1:11434/v1' }],
        models: [
          {
            name: 'llama',
            provider: 'ollama',
            modelId: 'llama3.1',
            contextWindow: 8192,
            maxOutputTokens: 2048,
          },
        ],
        defaultModel: 'llama',
      }),
    });
    expect(config.WAYMARK_MODELS?.models[0]?.modelId).toBe('llama3.1');
    try {
      loadConfig({ WAYMARK_MODELS: '{"providers":[],"models":[],"defaultModel":"x"}' });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      expect(
        (error as ConfigError).problems.every((line) => line.startsWith('WAYMARK_MODELS:')),
      ).toBe(true);
    }
    expect(() => loadConfig({ WAYMARK_MODELS: '{nope' })).toThrow(/WAYMARK_MODELS: not valid JSON/);
  });
});
