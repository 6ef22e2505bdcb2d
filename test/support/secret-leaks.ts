import { Writable } from 'node:stream';
import { afterAll, beforeAll, expect } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { configuredSecrets, createLogSecrets } from '../../src/log-secrets.js';
import { createLogger } from '../../src/logger.js';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeResponse } from '../fakes/provider-types.js';
import { startTestAppOn } from './app.js';
import { createTestDatabase } from './database.js';
import {
  bootstrapOperator,
  createTenant,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from './workflows.js';

/**
 * The app of the secret-leak tests: the production logger at trace, every
 * line it writes kept; the fake provider behind `gpt` (OpenAI's API,
 * falling back to `claude`) and `claude` (Anthropic's), their keys read
 * from the app's environment as main.ts reads the process's; a tenant.
 * And the secrets the tests plant, which the checks look for.
 */

export const OPENAI_KEY = 'sk-openai-leak-check-1111';
export const ANTHROPIC_KEY = 'sk-ant-leak-check-2222';
/** Header values of the HTTP tools and MCP servers the tests register. */
export const TOOL_TOKEN = 'tool-token-leak-check-3333';
export const TOOL_API_KEY = 'tool-apikey-leak-check-4444';
export const MCP_TOKEN = 'mcp-token-leak-check-5555';
export const SECRETS = [OPENAI_KEY, ANTHROPIC_KEY, TOOL_TOKEN, TOOL_API_KEY, MCP_TOKEN];

/** Fails naming the first of `secrets` (every one unless given) that `text`, what `what` says, holds. */
export function expectNoSecretIn(
  what: string,
  text: string,
  secrets: readonly string[] = SECRETS,
): void {
  for (const secret of secrets) expect(text, `${what} holds ${secret}`).not.toContain(secret);
}

function model(name: string, providerName: string) {
  return {
    name,
    provider: providerName,
    modelId: `${name}-id`,
    contextWindow: 32_000,
    maxOutputTokens: 256,
  };
}

async function startLeakCheckApp(logSink: Writable) {
  const database = await createTestDatabase();
  const provider = await startFakeProviderServer();
  /** The test app's environment. */
  const env: Record<string, string> = {
    LOG_LEVEL: 'trace',
    OAI_KEY: OPENAI_KEY,
    ANT_KEY: ANTHROPIC_KEY,
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    LLM_MAX_RETRIES_PER_MODEL: '0',
    LLM_BREAKER_THRESHOLD: '100',
    RATE_LIMIT_MAX: '100000',
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        { name: 'oai', kind: 'openai', baseUrl: provider.openaiBaseUrl, apiKeyEnv: 'OAI_KEY' },
        {
          name: 'ant',
          kind: 'anthropic',
          baseUrl: provider.anthropicBaseUrl,
          apiKeyEnv: 'ANT_KEY',
        },
      ],
      models: [{ ...model('gpt', 'oai'), fallbacks: ['claude'] }, model('claude', 'ant')],
      defaultModel: 'gpt',
    }),
  };
  /** The logger main.ts makes for `environment`, at trace, writing to `logged`. */
  function productionLogger(environment: Record<string, string>) {
    const secrets = createLogSecrets(configuredSecrets(loadConfig(environment), environment));
    return createLogger({ LOG_LEVEL: 'trace' }, { destination: logSink, secrets });
  }
  const testApp = await startTestAppOn(database, env, productionLogger(env));
  const tenant = await createTenant(testApp, await bootstrapOperator(testApp), {
    name: 'secretive',
  });
  return {
    database,
    provider,
    env,
    testApp,
    tenant,
    productionLogger,

    /** Runs a simple workflow on `input`, the model answering `replies`, to its end. */
    async runToEnd(input: string, ...replies: FakeResponse[]) {
      provider.enqueue(...replies);
      const id = await startWorkflow(testApp, tenant.key, { input, mode: 'simple' });
      const workflow = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
      return { id, workflow, events: await storedEvents(testApp, id) };
    },

    async close() {
      await testApp.close();
      await database.drop();
      await provider.close();
    },
  };
}

export type LeakCheckApp = Awaited<ReturnType<typeof startLeakCheckApp>> & {
  /** What the production logger wrote, every level. */
  logged: string;
};

/**
 * The test file's leak-check app, started before its tests (beforeAll) and
 * closed after them (afterAll): the object returned is filled in once it
 * has started, as useToolLoopHarness's is.
 */
export function useLeakCheckApp(): LeakCheckApp {
  // Empty but for the log until beforeAll: no test reads it before then.
  const leakCheck = { logged: '' } as LeakCheckApp;
  const logSink = new Writable({
    write(chunk, _encoding, done) {
      leakCheck.logged += String(chunk);
      done();
    },
  });
  beforeAll(async () => {
    Object.assign(leakCheck, await startLeakCheckApp(logSink));
  });
  afterAll(async () => {
    // Absent when the start failed.
    if ('close' in leakCheck) await leakCheck.close();
  });
  return leakCheck;
}
