import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { createLlm, type Llm } from '../../../src/llm/create-llm.js';
import { type DatabaseHandle, openDatabase } from '../../../src/store/database.js';
import { createTenancyService } from '../../../src/tenancy/service.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer } from '../../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Which key a provider's requests carry. A provider naming a variable
 * (apiKeyEnv) sends that variable's key, and one unset stops the start. The
 * vendor's usual variable (OPENAI_API_KEY) goes only to a provider without
 * a baseUrl of its own: the README's catalogue example has an `ollama`
 * provider (kind openai, a baseUrl, no apiKeyEnv), whose server must never
 * see the OpenAI key; it gets a placeholder, as a keyless local server needs.
 */

let database: TestDatabase;
let handle: DatabaseHandle;
let tenantId: string;
let thirdParty: FakeProviderServer;
let llm: Llm | undefined;

const OPENAI_SECRET = 'sk-real-openai-secret-123';

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 4, log: pino({ level: 'silent' }) });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
  thirdParty = await startFakeProviderServer();
});
afterAll(async () => {
  await llm?.close();
  await thirdParty?.close();
  await handle?.close();
  await database?.drop();
});

async function callModel(model: string): Promise<void> {
  if (!llm) throw new Error('no llm');
  thirdParty.enqueue({ kind: 'reply', text: 'hi' });
  for await (const _ of llm.router.stream({
    model,
    request: { messages: [{ role: 'user', content: 'hello' }] },
    signal: new AbortController().signal,
    context: { tenantId },
  })) {
    // drain
  }
}

function startLlm(providers: object[], env: Record<string, string>): Llm {
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    ...env,
    WAYMARK_MODELS: JSON.stringify({
      providers,
      models: [
        {
          name: 'fast',
          provider: 'openai',
          modelId: 'gpt-4o-mini',
          contextWindow: 128000,
          maxOutputTokens: 1000,
        },
        {
          name: 'local',
          provider: 'ollama',
          modelId: 'llama3.1',
          contextWindow: 8192,
          maxOutputTokens: 256,
        },
      ],
      defaultModel: 'fast',
    }),
  });
  llm = createLlm({ config, env, db: handle.db, log: pino({ level: 'silent' }) });
  return llm;
}

describe('provider keys go only where they belong', () => {
  it('README example: the ollama provider’s server gets a placeholder, not the OpenAI key', async () => {
    startLlm(
      [
        { name: 'openai', kind: 'openai', apiKeyEnv: 'OPENAI_API_KEY' },
        { name: 'ollama', kind: 'openai', baseUrl: thirdParty.openaiBaseUrl },
      ],
      { OPENAI_API_KEY: OPENAI_SECRET },
    );
    await callModel('local');
    const request = thirdParty.requests.at(-1);
    expect(request).toBeDefined();
    expect(request?.headers.authorization).toBe('Bearer no-key-needed');
    await llm?.close();
    llm = undefined;
  });

  it('a provider naming an apiKeyEnv that is unset stops the start instead of borrowing OPENAI_API_KEY', () => {
    expect(() =>
      startLlm(
        [
          { name: 'openai', kind: 'openai', apiKeyEnv: 'OPENAI_API_KEY' },
          {
            name: 'ollama',
            kind: 'openai',
            baseUrl: thirdParty.openaiBaseUrl,
            apiKeyEnv: 'OPENROUTER_API_KEY', // not set
          },
        ],
        { OPENAI_API_KEY: OPENAI_SECRET },
      ),
    ).toThrow(/^invalid configuration:\n {2}OPENROUTER_API_KEY: not set; provider "ollama"/);
  });

  it('a provider with a baseUrl sends the key its apiKeyEnv names', async () => {
    startLlm(
      [
        { name: 'openai', kind: 'openai', apiKeyEnv: 'OPENAI_API_KEY' },
        {
          name: 'ollama',
          kind: 'openai',
          baseUrl: thirdParty.openaiBaseUrl,
          apiKeyEnv: 'OPENROUTER_API_KEY',
        },
      ],
      { OPENAI_API_KEY: OPENAI_SECRET, OPENROUTER_API_KEY: 'sk-or-456' },
    );
    await callModel('local');
    expect(thirdParty.requests.at(-1)?.headers.authorization).toBe('Bearer sk-or-456');
    await llm?.close();
    llm = undefined;
  });

  it('OPENAI_BASE_URL alone (no WAYMARK_MODELS): the default models call that server with a placeholder key', async () => {
    const env = { LOG_LEVEL: 'silent', OPENAI_BASE_URL: thirdParty.openaiBaseUrl };
    llm = createLlm({
      config: loadConfig(env),
      env,
      db: handle.db,
      log: pino({ level: 'silent' }),
    });
    await callModel('gpt-4o-mini');
    const request = thirdParty.requests.at(-1);
    expect(request?.headers.authorization).toBe('Bearer no-key-needed');
    expect(request?.body).toMatchObject({ model: 'gpt-4o-mini' });
    await llm.close();
    llm = undefined;
  });
});
