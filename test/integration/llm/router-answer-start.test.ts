import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, createAnthropicClient } from '../../../src/llm/anthropic/index.js';
import { catalogueSchema } from '../../../src/llm/catalogue.js';
import { createOpenAiClient, openAiModel } from '../../../src/llm/openai/index.js';
import { createProviderFetch } from '../../../src/llm/provider-fetch.js';
import { createModelRouter } from '../../../src/llm/router/router.js';
import type { AttemptRecord } from '../../../src/llm/router/types.js';
import type {
  LanguageModel,
  ModelRequest,
  StreamPart,
  ToolDefinition,
} from '../../../src/llm/types.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer, FakeResponse } from '../../fakes/provider-types.js';

/**
 * The router's first-part timeout (LLM_ATTEMPT_TIMEOUT_MS) against the real
 * adapters and SDKs. The adapters yield a tool call only once its arguments
 * are complete, so a reply that is one tool call with a long input (a
 * document written as an argument) has no part for as long as its
 * arguments stream; it was failed as "no answer within N ms" and every
 * retry failed the same way. The timeout now ends where the provider
 * starts answering; the idle watchdog and the stream's deadline bound the
 * rest.
 */

const ATTEMPT_TIMEOUT_MS = 600;
/** The fake splits arguments into three deltas: two pauses, ~1 s of input after the call starts. */
const ARGUMENT_DELTA_DELAY_MS = 500;

let server: FakeProviderServer;
const transport = createProviderFetch();
beforeAll(async () => {
  server = await startFakeProviderServer();
});
afterAll(async () => {
  transport.close();
  await server?.close();
});

const writeDoc: ToolDefinition = {
  name: 'write_doc',
  description: 'Stores a document',
  parameters: z.object({ text: z.string() }),
};

type Kind = 'anthropic' | 'openai';

function languageModel(kind: Kind): LanguageModel {
  // Far longer than any gap between two events of the replies below.
  const common = { modelId: 'model-id', maxOutputTokens: 4096, idleTimeoutMs: 2_000 };
  const client = {
    apiKey: 'k',
    timeoutMs: 5_000,
    fetch: transport.fetch,
    log: pino({ level: 'silent' }),
  };
  return kind === 'anthropic'
    ? anthropicModel({
        ...common,
        provider: 'ant',
        client: createAnthropicClient({ ...client, baseUrl: server.anthropicBaseUrl }),
      })
    : openAiModel({
        ...common,
        provider: 'oai',
        client: createOpenAiClient({ ...client, baseUrl: server.openaiBaseUrl }),
      });
}

/** One turn on a single-model chain with one attempt: a timeout fails it at once. */
async function turn(kind: Kind, request: ModelRequest, response: FakeResponse) {
  const provider = kind === 'anthropic' ? 'ant' : 'oai';
  const catalogue = catalogueSchema.parse({
    providers: [
      { name: 'ant', kind: 'anthropic', baseUrl: server.anthropicBaseUrl },
      { name: 'oai', kind: 'openai', baseUrl: server.openaiBaseUrl },
    ],
    models: [
      {
        name: 'only',
        provider,
        modelId: 'model-id',
        contextWindow: 200_000,
        maxOutputTokens: 4096,
      },
    ],
    defaultModel: 'only',
  });
  const records: AttemptRecord[] = [];
  const router = createModelRouter({
    catalogue,
    languageModels: new Map([['only', languageModel(kind)]]),
    policy: {
      maxTotalAttempts: 1,
      maxRetriesPerModel: 0,
      backoffBaseMs: 1,
      backoffMaxMs: 1,
      maxRetryAfterMs: 1000,
      attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
      streamMaxMs: 30_000,
      breakerFailureThreshold: 100,
      breakerProbeIntervalMs: 60_000,
    },
    log: pino({ level: 'silent' }),
    recordAttempt: (record) => records.push(record),
  });
  server.enqueue(response);
  const parts: StreamPart[] = [];
  try {
    for await (const part of router.stream({
      model: 'only',
      request,
      signal: new AbortController().signal,
      context: { tenantId: 't' },
    })) {
      parts.push(part);
    }
  } finally {
    router.dispose();
  }
  const error = parts.find((part) => part.type === 'error');
  return { parts, records, error: error?.type === 'error' ? error.error : undefined };
}

const longToolCall: FakeResponse = {
  kind: 'reply',
  toolCalls: [{ name: 'write_doc', arguments: { text: 'lorem ipsum dolor '.repeat(40) } }],
  chunkDelayMs: ARGUMENT_DELTA_DELAY_MS,
};
const writeIt: ModelRequest = {
  messages: [{ role: 'user', content: 'Write it' }],
  tools: [writeDoc],
};

describe.each<Kind>(['anthropic', 'openai'])(
  'router + %s adapter: the first-part timeout',
  (kind) => {
    it('a reply that is one tool call whose input streams past the timeout is not failed', async () => {
      const started = performance.now();
      const result = await turn(kind, writeIt, longToolCall);
      expect(performance.now() - started).toBeGreaterThan(ATTEMPT_TIMEOUT_MS);
      expect(result.error?.message).toBeUndefined();
      expect(result.parts.map((part) => part.type)).toEqual(['tool-call', 'usage', 'finish']);
      expect(result.parts[0]).toMatchObject({
        type: 'tool-call',
        toolCall: { name: 'write_doc', arguments: { text: 'lorem ipsum dolor '.repeat(40) } },
      });
      // One attempt, its time to the answer's start well inside the timeout.
      expect(result.records.map((record) => record.outcome)).toEqual(['ok']);
      expect(result.records[0]?.ttftMs).toBeLessThan(ATTEMPT_TIMEOUT_MS);
    });

    it('text streamed at the same pace is not failed either', async () => {
      const result = await turn(
        kind,
        { messages: [{ role: 'user', content: 'Count' }] },
        { kind: 'reply', chunks: ['one ', 'two ', 'three'], chunkDelayMs: ARGUMENT_DELTA_DELAY_MS },
      );
      expect(result.parts.map((part) => part.type)).toEqual([
        'text-delta',
        'text-delta',
        'text-delta',
        'usage',
        'finish',
      ]);
    });

    it('an answer that has not started when the timeout passes still fails the attempt as a timeout', async () => {
      const result = await turn(kind, writeIt, {
        ...longToolCall,
        firstByteDelayMs: ATTEMPT_TIMEOUT_MS * 3,
      });
      expect(result.error?.code).toBe('llm_timeout');
      expect(result.error?.message).toContain(`no answer within ${ATTEMPT_TIMEOUT_MS} ms`);
      expect(result.records.map((record) => [record.outcome, record.ttftMs])).toEqual([
        ['timeout', null],
      ]);
    });
  },
);

describe('router + openai adapter: the stream opening is not the answer', () => {
  it('a stream that sends its role-only chunk and then nothing fails at the first-part timeout, not the idle one', async () => {
    const result = await turn('openai', writeIt, { kind: 'stall' });
    expect(result.error?.code).toBe('llm_timeout');
    expect(result.error?.message).toContain(`no answer within ${ATTEMPT_TIMEOUT_MS} ms`);
  });
});
