import { getEventListeners } from 'node:events';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { createLlm, type Llm } from '../../../src/llm/create-llm.js';
import type { RouterEvent } from '../../../src/llm/router/types.js';
import type { ModelRequest, StreamPart } from '../../../src/llm/types.js';
import { type DatabaseHandle, openDatabase } from '../../../src/store/database.js';
import { llmCallsRepository } from '../../../src/store/llm-calls.js';
import { createTenancyService } from '../../../src/tenancy/service.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer, FakeResponse } from '../../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * The router as the service builds it: configuration -> createLlm -> real
 * adapters -> the real OpenAI and Anthropic SDKs -> the fake provider server.
 * Model chain: `primary` (OpenAI) -> `secondary` (Anthropic) -> `tertiary`
 * (OpenAI); `small` moves to `large` on a context-length error.
 */

let database: TestDatabase;
let handle: DatabaseHandle;
let tenantId: string;
let server: FakeProviderServer;
let llm: Llm;

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 4, log: pino({ level: 'silent' }) });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

beforeEach(async () => {
  server = await startFakeProviderServer();
});
afterEach(async () => {
  await llm?.close();
  await server.close();
});

function startLlm(env: Record<string, string> = {}): Llm {
  const model = (name: string, provider: string, extra: object = {}) => ({
    name,
    provider,
    modelId: `${name}-id`,
    contextWindow: 8000,
    maxOutputTokens: 256,
    pricing: { input: 1, output: 2, cachedInput: 0.5 },
    ...extra,
  });
  // The providers' key variables: loadConfig checks they are set.
  const keys = { FAKE_OPENAI_KEY: 'sk-fake', FAKE_ANTHROPIC_KEY: 'sk-ant-fake' };
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    ...keys,
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        {
          name: 'oai',
          kind: 'openai',
          baseUrl: server.openaiBaseUrl,
          apiKeyEnv: 'FAKE_OPENAI_KEY',
        },
        {
          name: 'ant',
          kind: 'anthropic',
          baseUrl: server.anthropicBaseUrl,
          apiKeyEnv: 'FAKE_ANTHROPIC_KEY',
        },
        {
          name: 'oai-b',
          kind: 'openai',
          baseUrl: server.openaiBaseUrl,
          apiKeyEnv: 'FAKE_OPENAI_KEY',
        },
      ],
      models: [
        model('primary', 'oai', { fallbacks: ['secondary', 'tertiary'] }),
        model('secondary', 'ant'),
        model('tertiary', 'oai-b'),
        model('small', 'oai', { largerContext: 'large' }),
        model('large', 'ant', { contextWindow: 200_000 }),
      ],
      defaultModel: 'primary',
    }),
    LLM_BACKOFF_BASE_MS: '5',
    LLM_BACKOFF_MAX_MS: '20',
    LLM_MAX_RETRIES_PER_MODEL: '2',
    LLM_MAX_TOTAL_ATTEMPTS: '9',
    LLM_IDLE_TIMEOUT_MS: '300',
    LLM_ATTEMPT_TIMEOUT_MS: '5000',
    LLM_BREAKER_THRESHOLD: '100',
    ...env,
  });
  llm = createLlm({
    config,
    env: keys,
    db: handle.db,
    log: pino({ level: 'silent' }),
  });
  return llm;
}

const question: ModelRequest = { messages: [{ role: 'user', content: 'Say hello' }] };

async function turn(
  options: { model?: string; signal?: AbortSignal; onPart?: (part: StreamPart) => void } = {},
) {
  const events: RouterEvent[] = [];
  const parts: StreamPart[] = [];
  for await (const part of llm.router.stream({
    model: options.model ?? 'primary',
    request: question,
    signal: options.signal ?? new AbortController().signal,
    context: { tenantId },
    onEvent: (event) => events.push(event),
  })) {
    parts.push(part);
    options.onPart?.(part);
  }
  const text = parts.flatMap((part) => (part.type === 'text-delta' ? [part.text] : [])).join('');
  const error = parts.find((part) => part.type === 'error');
  return { parts, events, text, error: error?.type === 'error' ? error.error : undefined };
}

const apis = () => server.requests.map((request) => request.api);
const ok: FakeResponse = { kind: 'reply', text: 'Hello there', usage: { input: 10, output: 3 } };

describe('model router', () => {
  it('streams an answer and records the attempt in the usage ledger', async () => {
    startLlm();
    server.enqueue(ok);
    const result = await turn();
    expect(result.text).toBe('Hello there');
    expect(result.parts.at(-1)).toMatchObject({ type: 'finish', reason: 'stop' });
    await llm.ledger.flush();
    const rows = await llmCallsRepository(handle.db).listByTenant(tenantId, 1);
    expect(rows[0]).toMatchObject({
      model: 'primary',
      provider: 'oai',
      model_id: 'primary-id',
      attempt: 1,
      outcome: 'ok',
      input_tokens: 10,
      output_tokens: 3,
    });
    expect(Number(rows[0]?.cost_usd)).toBeCloseTo((10 * 1 + 3 * 2) / 1e6, 10);
  });

  it.each<[string, FakeResponse, string]>([
    [
      '429 with retry-after',
      { kind: 'error', status: 429, headers: { 'retry-after-ms': '30' } },
      'rate_limited',
    ],
    ['500', { kind: 'error', status: 500 }, 'server_error'],
    ['503', { kind: 'error', status: 503 }, 'overloaded'],
    ['an error event inside a 200 stream', { kind: 'stream-error' }, 'overloaded'],
    ['a connection reset', { kind: 'reset' }, 'connection'],
    ['a cut stream', { kind: 'cut' }, 'stream_interrupted'],
    ['a stall mid-stream', { kind: 'stall', afterChunks: [] }, 'timeout'],
  ])('%s before any text: retried on the same model, then answered', async (_name, fault, kind) => {
    startLlm();
    server.enqueue(fault, ok);
    const result = await turn();
    expect(result.text).toBe('Hello there');
    expect(apis()).toEqual(['openai', 'openai']);
    expect(result.events).toEqual([
      expect.objectContaining({ type: 'retry', model: 'primary', attempt: 2 }),
    ]);
    const retry = result.events[0];
    expect(retry?.type === 'retry' && retry.error.kind).toBe(kind);
  });

  it('honours retry-after: the retry waits at least as long as asked', async () => {
    startLlm();
    server.enqueue({ kind: 'error', status: 429, headers: { 'retry-after-ms': '150' } }, ok);
    const result = await turn();
    const retry = result.events[0];
    expect(retry?.type === 'retry' && retry.delayMs).toBeGreaterThanOrEqual(150);
    const [first, second] = server.requests;
    expect((second?.receivedAt ?? 0) - (first?.receivedAt ?? 0)).toBeGreaterThanOrEqual(140);
  });

  it('a 529 from Anthropic falls through after the retries to the next model', async () => {
    startLlm();
    const down: FakeResponse = { kind: 'error', status: 500 };
    const overloaded: FakeResponse = { kind: 'error', status: 529 };
    server.enqueue(down, down, down, overloaded, overloaded, overloaded, ok);
    const result = await turn();
    expect(result.text).toBe('Hello there');
    expect(apis()).toEqual([
      'openai',
      'openai',
      'openai',
      'anthropic',
      'anthropic',
      'anthropic',
      'openai',
    ]);
    expect(result.events.filter((event) => event.type === 'fallback')).toEqual([
      expect.objectContaining({ from: 'primary', to: 'secondary', reason: 'error' }),
      expect.objectContaining({ from: 'secondary', to: 'tertiary', reason: 'error' }),
    ]);
    await llm.ledger.flush();
    const rows = await llmCallsRepository(handle.db).listByTenant(tenantId, 7);
    expect(rows.map((row) => row.outcome).reverse()).toEqual([
      'server_error',
      'server_error',
      'server_error',
      'overloaded',
      'overloaded',
      'overloaded',
      'ok',
    ]);
    expect(rows.map((row) => row.attempt).reverse()).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('caps the total attempts across the whole chain', async () => {
    startLlm({ LLM_MAX_TOTAL_ATTEMPTS: '4' });
    server.enqueue(
      ...Array.from({ length: 9 }, (): FakeResponse => ({ kind: 'error', status: 500 })),
    );
    const result = await turn();
    expect(server.requests).toHaveLength(4);
    expect(result.error?.kind).toBe('server_error');
    expect(result.parts).toHaveLength(1);
  });

  it('an invalid request is neither retried nor fallen through', async () => {
    startLlm();
    server.enqueue({ kind: 'error', status: 400, type: 'invalid_request' });
    const result = await turn();
    expect(server.requests).toHaveLength(1);
    expect(result.error).toMatchObject({ kind: 'invalid_request', code: 'llm_invalid_request' });
    expect(result.events).toEqual([]);
  });

  it('an authentication error falls through at once and opens that provider’s circuit', async () => {
    startLlm();
    server.enqueue({ kind: 'error', status: 401 }, ok);
    const result = await turn();
    expect(result.text).toBe('Hello there');
    expect(apis()).toEqual(['openai', 'anthropic']);
    expect(llm.router.isProviderOpen('oai')).toBe(true);
    server.enqueue(ok);
    const next = await turn();
    expect(next.events[0]).toMatchObject({
      type: 'fallback',
      from: 'primary',
      reason: 'circuit_open',
    });
    expect(apis()).toEqual(['openai', 'anthropic', 'anthropic']);
  });

  it('a context-length error moves to the larger-context model', async () => {
    startLlm();
    server.enqueue({ kind: 'error', status: 400, type: 'context_length' }, ok);
    const result = await turn({ model: 'small' });
    expect(result.text).toBe('Hello there');
    expect(apis()).toEqual(['openai', 'anthropic']);
    expect(result.events).toEqual([
      expect.objectContaining({
        type: 'fallback',
        from: 'small',
        to: 'large',
        reason: 'context_length',
      }),
    ]);
  });

  it('never falls back after the first visible token: the turn ends with an error part', async () => {
    startLlm();
    server.enqueue({ kind: 'stream-error', afterChunks: ['Hello ', 'wor'] }, ok);
    const result = await turn();
    expect(result.text).toBe('Hello wor');
    expect(result.parts.at(-1)).toMatchObject({ type: 'error' });
    expect(server.requests).toHaveLength(1);
    expect(result.events).toEqual([]);
  });

  it('an answer far past its maxOutputTokens is cut off (llm_stream_interrupted), not read to its end', async () => {
    startLlm();
    // 50,000 characters for 256 tokens: past 256 × 64 the call ends.
    server.enqueue({ kind: 'reply', chunks: Array.from({ length: 50 }, () => 'x'.repeat(1_000)) });
    const result = await turn();
    expect(result.error?.code).toBe('llm_stream_interrupted');
    // The text up to the bound, not the part past it, however fast the rest came.
    expect(result.text.length).toBeGreaterThan(0);
    expect(result.text.length).toBeLessThanOrEqual(256 * 64);
    expect(server.requests).toHaveLength(1);
  });

  it('a stream still going at LLM_STREAM_MAX_MS fails as a timeout, though its chunks keep the idle watchdog quiet', async () => {
    startLlm({ LLM_STREAM_MAX_MS: '1000', LLM_IDLE_TIMEOUT_MS: '300' });
    // 40 chunks 100 ms apart: 4 s of a stream that is never idle.
    server.enqueue({
      kind: 'reply',
      chunks: Array.from({ length: 40 }, () => 'tick '),
      chunkDelayMs: 100,
    });
    const result = await turn();
    expect(result.error?.code).toBe('llm_timeout');
    expect(result.text.length).toBeGreaterThan(0);
    expect(result.text.length).toBeLessThan(40 * 5);
    expect(server.requests).toHaveLength(1);
  });

  it('cancel aborts the in-flight stream and is not retried', async () => {
    startLlm({ LLM_IDLE_TIMEOUT_MS: '30000' });
    server.enqueue({ kind: 'stall', afterChunks: ['Thinking'] }, ok);
    const controller = new AbortController();
    const result = await turn({
      signal: controller.signal,
      onPart: (part) => {
        if (part.type === 'text-delta') controller.abort(new Error('user cancelled'));
      },
    });
    expect(result.text).toBe('Thinking');
    expect(result.error?.kind).toBe('cancelled');
    expect(server.requests).toHaveLength(1);
    await expect.poll(() => server.abortedRequests()).toBe(1);
  });

  it('a caller that stops reading: the request is closed and no listener stays on its signal', async () => {
    startLlm({ LLM_IDLE_TIMEOUT_MS: '30000' });
    server.enqueue({ kind: 'stall', afterChunks: ['Thinking'] });
    const controller = new AbortController();
    const parts: StreamPart[] = [];
    for await (const part of llm.router.stream({
      model: 'primary',
      request: question,
      signal: controller.signal,
      context: { tenantId },
    })) {
      parts.push(part);
      break;
    }
    expect(parts).toEqual([{ type: 'text-delta', text: 'Thinking' }]);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    await expect.poll(() => server.abortedRequests()).toBe(1);
    expect(server.requests).toHaveLength(1);
  });

  it('the breaker opens after N consecutive failures and a scheduled probe closes it', async () => {
    startLlm({
      LLM_BREAKER_THRESHOLD: '2',
      LLM_MAX_RETRIES_PER_MODEL: '0',
      LLM_BREAKER_PROBE_MS: '200',
    });
    server.enqueue({ kind: 'error', status: 500 }, ok, { kind: 'error', status: 500 }, ok);
    await turn();
    await turn();
    expect(llm.router.isProviderOpen('oai')).toBe(true);
    expect(apis()).toEqual(['openai', 'anthropic', 'openai', 'anthropic']);
    server.enqueue(ok);
    await expect.poll(() => llm.router.isProviderOpen('oai'), { timeout: 5000 }).toBe(false);
    const probe = server.requests[4];
    expect(probe?.api).toBe('openai');
    expect(probe?.body.max_completion_tokens).toBe(1);
    server.enqueue(ok);
    const after = await turn();
    expect(after.events).toEqual([]);
    expect(server.requests.at(-1)?.body.model).toBe('primary-id');
  });
});
