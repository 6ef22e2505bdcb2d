import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.js';

/**
 * loadConfig checks the settings that refer to the model catalogue with
 * every other variable: one line per problem, naming the variable to fix.
 */

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

const catalogue = (providers: object[]) =>
  JSON.stringify({
    providers,
    models: [
      { name: 'main', provider: 'p', modelId: 'm', contextWindow: 8000, maxOutputTokens: 256 },
    ],
    defaultModel: 'main',
  });

describe('model settings checked at load', () => {
  it('WAYMARK_DEFAULT_MODEL and CLASSIFY_MODEL must be in the catalogue', () => {
    expect(
      problemsOf({
        WAYMARK_DEFAULT_MODEL: 'nope',
        CLASSIFY_WITH_MODEL: 'true',
        CLASSIFY_MODEL: 'neither',
      }),
    ).toEqual([
      'WAYMARK_DEFAULT_MODEL: "nope" is not in the catalogue (scripted)',
      'CLASSIFY_MODEL: "neither" is not in the catalogue (scripted)',
    ]);
    expect(problemsOf({ CLASSIFY_MODEL: 'neither' })).toEqual([]); // not asked while the check is off
    expect(loadConfig({ OPENAI_API_KEY: 'sk-x', WAYMARK_DEFAULT_MODEL: 'gpt-4o' })).toBeDefined();
  });

  it('listed with the other bad variables', () => {
    expect(problemsOf({ PORT: 'abc', WAYMARK_DEFAULT_MODEL: 'nope' })).toEqual([
      'PORT: expected a whole number from 0 to 65535 (got "abc")',
      'WAYMARK_DEFAULT_MODEL: "nope" is not in the catalogue (scripted)',
    ]);
  });

  it('a provider’s key variable named but unset, or no key for the vendor’s own endpoint', () => {
    expect(
      problemsOf({
        WAYMARK_MODELS: catalogue([{ name: 'p', kind: 'anthropic', apiKeyEnv: 'MY_KEY' }]),
      }),
    ).toEqual(['MY_KEY: not set; provider "p" reads its key from it (apiKeyEnv)']);
    expect(
      problemsOf({
        MY_KEY: 'sk',
        WAYMARK_MODELS: catalogue([{ name: 'p', kind: 'anthropic', apiKeyEnv: 'MY_KEY' }]),
      }),
    ).toEqual([]);
    expect(problemsOf({ WAYMARK_MODELS: catalogue([{ name: 'p', kind: 'openai' }]) })).toEqual([
      `OPENAI_API_KEY: provider "p" needs a key: set OPENAI_API_KEY, or name its variable in the provider's apiKeyEnv`,
    ]);
    // A server of its own, or the vendor's base URL, may need no key.
    expect(
      problemsOf({
        WAYMARK_MODELS: catalogue([
          { name: 'p', kind: 'openai', baseUrl: 'http://127.0.0.1:11434/v1' },
        ]),
      }),
    ).toEqual([]);
    expect(
      problemsOf({
        OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1',
        WAYMARK_MODELS: catalogue([{ name: 'p', kind: 'openai' }]),
      }),
    ).toEqual([]);
  });

  it('a WAYMARK_MODELS that does not parse is reported once, by its own lines', () => {
    expect(problemsOf({ WAYMARK_MODELS: '{nope', WAYMARK_DEFAULT_MODEL: 'x' })).toEqual([
      expect.stringMatching(/^WAYMARK_MODELS: not valid JSON/),
    ]);
  });
});
