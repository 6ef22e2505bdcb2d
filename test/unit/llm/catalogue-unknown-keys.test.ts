import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.js';

/**
 * WAYMARK_MODELS with a key the catalogue does not know stops the start,
 * naming the key: a misspelt optional field would otherwise be as if it
 * were absent (`baseURL`, the OpenAI SDK's spelling, for `baseUrl` would
 * send the local model's prompts to api.openai.com; `fallback` for
 * `fallbacks` would drop the fallback chain).
 */

const model = (extra: object = {}) => ({
  name: 'local',
  provider: 'ollama',
  modelId: 'llama3.1',
  contextWindow: 8192,
  maxOutputTokens: 2048,
  ...extra,
});

function problemsOf(catalogue: object): string[] {
  try {
    loadConfig({ OPENAI_API_KEY: 'sk-x', WAYMARK_MODELS: JSON.stringify(catalogue) });
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe('WAYMARK_MODELS with an unknown key', () => {
  it('`baseURL` for `baseUrl` in a provider: an error naming the key and the known ones', () => {
    const problems = problemsOf({
      providers: [{ name: 'ollama', kind: 'openai', baseURL: 'http://127.0.0.1:11434/v1' }],
      models: [model()],
      defaultModel: 'local',
    });
    expect(problems).toEqual([
      'WAYMARK_MODELS: providers.0: unknown key "baseURL" (known: name, kind, apiKeyEnv, baseUrl)',
    ]);
  });

  it('`fallback` for `fallbacks` in a model: an error naming the key', () => {
    const problems = problemsOf({
      providers: [{ name: 'ollama', kind: 'openai', baseUrl: 'http://127.0.0.1:11434/v1' }],
      models: [model({ fallback: ['other'] }), model({ name: 'other' })],
      defaultModel: 'local',
    });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^WAYMARK_MODELS: models\.0: unknown key "fallback" \(known: /);
  });

  it('in the pricing and at the top level too', () => {
    const problems = problemsOf({
      providers: [{ name: 'ollama', kind: 'openai', baseUrl: 'http://127.0.0.1:11434/v1' }],
      models: [model({ pricing: { input: 1, output: 2, cachedInput: 0.5, cached_input: 0.1 } })],
      defaultModel: 'local',
      default_model: 'local',
    });
    expect(problems.map((line) => line.replace(/ \(known: .*\)$/, ''))).toEqual([
      'WAYMARK_MODELS: models.0.pricing: unknown key "cached_input"',
      'WAYMARK_MODELS: (root): unknown key "default_model"',
    ]);
  });
});
