import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { createLlm, type Llm } from '../../../src/llm/create-llm.js';
import { CLASSIFY_MARKER } from '../../../src/llm/scripted/markers.js';
import { classifierSettings, classifyQuestion } from '../../../src/orchestrator/classify.js';
import { type DatabaseHandle, openDatabase } from '../../../src/store/database.js';
import { llmCallsRepository } from '../../../src/store/llm-calls.js';
import { createTenancyService } from '../../../src/tenancy/service.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer } from '../../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Complexity detection's model check through the stack the service builds:
 * configuration -> createLlm -> router -> adapter. Offline, the scripted
 * model answers classification requests; against the fake provider server
 * the real OpenAI SDK carries the check and its failures.
 */

let database: TestDatabase;
let handle: DatabaseHandle;
let tenantId: string;
let llm: Llm | undefined;
let server: FakeProviderServer | undefined;

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 2, log: pino({ level: 'silent' }) });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});
afterEach(async () => {
  await llm?.close();
  await server?.close();
  llm = undefined;
  server = undefined;
});

function startLlm(env: Record<string, string>): {
  llm: Llm;
  config: ReturnType<typeof loadConfig>;
} {
  const keys = { FAKE_OPENAI_KEY: 'sk-fake' };
  const config = loadConfig({ LOG_LEVEL: 'silent', CLASSIFY_WITH_MODEL: 'true', ...keys, ...env });
  llm = createLlm({
    config,
    env: keys,
    db: handle.db,
    log: pino({ level: 'silent' }),
  });
  return { llm, config };
}

async function classifyWith(
  started: { llm: Llm; config: ReturnType<typeof loadConfig> },
  input: string,
) {
  const settings = classifierSettings(started.config, started.llm.catalogue);
  if (!settings.checkModel) throw new Error('the model check is off');
  return classifyQuestion({
    input,
    mode: 'auto',
    keywords: settings.keywords,
    modelCheck: {
      router: started.llm.router,
      model: settings.checkModel,
      signal: new AbortController().signal,
      context: { tenantId },
    },
  });
}

/** A catalogue with one OpenAI-kind provider pointed at the fake provider server. */
async function fakeProviderEnv(): Promise<Record<string, string>> {
  server = await startFakeProviderServer();
  return {
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        {
          name: 'oai',
          kind: 'openai',
          baseUrl: server.openaiBaseUrl,
          apiKeyEnv: 'FAKE_OPENAI_KEY',
        },
      ],
      models: [
        {
          name: 'main',
          provider: 'oai',
          modelId: 'main-id',
          contextWindow: 8000,
          maxOutputTokens: 256,
        },
        {
          name: 'cheap',
          provider: 'oai',
          modelId: 'cheap-id',
          contextWindow: 8000,
          maxOutputTokens: 256,
        },
      ],
      defaultModel: 'main',
    }),
    CLASSIFY_MODEL: 'cheap',
    LLM_BACKOFF_BASE_MS: '5',
    LLM_BACKOFF_MAX_MS: '20',
  };
}

describe('classification model check', () => {
  it('offline: the scripted default model answers, and its answer decides', async () => {
    const started = startLlm({});
    expect(started.llm.catalogue.defaultModel).toBe('scripted');
    // No keyword of the default list, but over the scripted model's 40-word length rule.
    const long = Array.from({ length: 45 }, (_, index) => `word${index}`).join(' ');
    const complex = await classifyWith(started, long);
    expect(complex).toMatchObject({ kind: 'complex', method: 'model' });
    expect(complex.reason).toBe(
      'model "scripted" answered complex (keywords: no complexity keyword matched)',
    );
    const simple = await classifyWith(started, 'What is the capital of France?');
    expect(simple).toMatchObject({ kind: 'simple', method: 'model' });
  });

  it('records the check in the usage ledger like any model call', async () => {
    const started = startLlm({});
    await classifyWith(started, 'Compare A and B');
    await started.llm.ledger.flush();
    const rows = await llmCallsRepository(handle.db).listByTenant(tenantId, 10);
    expect(rows.some((row) => row.model === 'scripted' && row.outcome === 'ok')).toBe(true);
  });

  it('asks the configured cheap model with a 10-token limit and the classification prompt', async () => {
    const started = startLlm(await fakeProviderEnv());
    server?.enqueue({ kind: 'reply', text: 'complex' });
    const result = await classifyWith(started, 'What is 2+2?');
    expect(result).toMatchObject({ kind: 'complex', method: 'model' });
    const [request] = server?.requests ?? [];
    expect(request?.body.model).toBe('cheap-id');
    expect(request?.body.max_completion_tokens).toBe(10);
    expect(request?.body.tools).toBeUndefined();
    expect(request?.body.messages[0]).toMatchObject({ role: 'system' });
    expect(String(request?.body.messages[0].content).split('\n')).toContain(CLASSIFY_MARKER);
  });

  it('falls back to the keywords when the model check fails with a 400', async () => {
    const started = startLlm(await fakeProviderEnv());
    server?.enqueue({ kind: 'error', status: 400 });
    const result = await classifyWith(started, 'Compare A and B, then C');
    expect(result).toEqual({
      kind: 'complex',
      method: 'keywords',
      reason:
        'the model check failed because the model provider rejected the request, so the keywords decided: matched "compare" and "then"',
    });
    expect(server?.requests).toHaveLength(1);
  });

  it('falls back to the keywords when the model answers something else', async () => {
    const started = startLlm(await fakeProviderEnv());
    server?.enqueue({ kind: 'reply', text: 'Sure! Paris is the capital.' });
    const result = await classifyWith(started, 'What is the capital of France?');
    expect(result).toEqual({
      kind: 'simple',
      method: 'keywords',
      reason:
        'model "cheap" gave no usable answer ("Sure! Paris is the capital."), so the keywords decided: no complexity keyword matched',
      // The check's call is counted all the same (free here: the catalogue has no prices).
      usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 0, costUsd: 0 },
    });
  });
});
