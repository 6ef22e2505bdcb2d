import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { resolveCatalogue } from '../../../src/llm/model-settings.js';

/**
 * Without WAYMARK_MODELS, a vendor's base URL variable set alone (a server
 * that needs no key: a local Ollama or vLLM) enables that vendor's default
 * models as its key would, instead of being ignored in favour of the
 * offline scripted model.
 */

describe('the default catalogue with a base URL and no key', () => {
  it('OPENAI_BASE_URL alone: the default OpenAI models, on a provider without a key variable', () => {
    const catalogue = resolveCatalogue(
      loadConfig({ OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1' }),
    );
    expect(catalogue.providers).toEqual([{ name: 'openai', kind: 'openai' }]);
    expect(catalogue.models.map((model) => model.name)).toEqual(['gpt-4o-mini', 'gpt-4o']);
    expect(catalogue.defaultModel).toBe('gpt-4o-mini');
  });

  it('ANTHROPIC_BASE_URL alone: the default Claude models', () => {
    const catalogue = resolveCatalogue(
      loadConfig({ ANTHROPIC_BASE_URL: 'http://127.0.0.1:4000/anthropic' }),
    );
    expect(catalogue.providers).toEqual([{ name: 'anthropic', kind: 'anthropic' }]);
    expect(catalogue.defaultModel).toBe('claude-haiku-4-5');
  });

  it('neither a key nor a base URL: the offline scripted model', () => {
    expect(resolveCatalogue(loadConfig({})).defaultModel).toBe('scripted');
  });
});
