import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, createAnthropicClient } from '../../../src/llm/anthropic/index.js';
import { catalogueSchema } from '../../../src/llm/catalogue.js';
import { createOpenAiClient, openAiModel } from '../../../src/llm/openai/index.js';
import { createProviderFetch } from '../../../src/llm/provider-fetch.js';
import { createModelRouter } from '../../../src/llm/router/router.js';
import type { LanguageModel, StreamPart, ToolDefinition } from '../../../src/llm/types.js';
import { type FakeProviderServer, startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeResponse } from '../../fakes/provider-types.js';

/**
 * The router bounds a call's output at maxOutputTokens x 64 characters
 * (output-bound.ts): text and tool-call arguments together. A provider that
 * ignores its limits and streams a call's arguments without end fails the
 * call as a cut-off answer (llm_stream_interrupted), rather than having them
 * kept whole in memory, handed to the tool and stored with the turn. Both
 * adapters, through the real SDKs, against the fake provider server.
 */

let server: FakeProviderServer;
const transport = createProviderFetch();
beforeAll(async () => {
  server = await startFakeProviderServer();
});
afterEach(() => {
  expect(server.pendingResponses()).toBe(0);
});
afterAll(async () => {
  transport.close();
  await server?.close();
});

/** 16 tokens allow 16 x 64 = 1,024 characters of output. */
const MAX_OUTPUT_TOKENS = 16;

const writeDoc: ToolDefinition = {
  name: 'write_doc',
  description: 'Stores a document',
  parameters: z.object({ text: z.string() }),
};

function languageModel(vendor: 'openai' | 'anthropic'): LanguageModel {
  const client = {
    apiKey: 'test-key',
    timeoutMs: 5_000,
    fetch: transport.fetch,
    log: pino({ level: 'silent' }),
  };
  const model = {
    provider: vendor,
    modelId: 'test-model',
    maxOutputTokens: MAX_OUTPUT_TOKENS,
    idleTimeoutMs: 2_000,
  };
  return vendor === 'openai'
    ? openAiModel({
        ...model,
        client: createOpenAiClient({ ...client, baseUrl: server.openaiBaseUrl }),
      })
    : anthropicModel({
        ...model,
        client: createAnthropicClient({ ...client, baseUrl: server.anthropicBaseUrl }),
      });
}

/** One turn through a router of that vendor's one model, one attempt at most. */
async function turn(vendor: 'openai' | 'anthropic', response: FakeResponse): Promise<StreamPart[]> {
  const catalogue = catalogueSchema.parse({
    providers: [
      {
        name: vendor,
        kind: vendor,
        baseUrl: vendor === 'openai' ? server.openaiBaseUrl : server.anthropicBaseUrl,
      },
    ],
    models: [
      {
        name: 'model',
        provider: vendor,
        modelId: 'test-model',
        contextWindow: 200_000,
        maxOutputTokens: MAX_OUTPUT_TOKENS,
      },
    ],
    defaultModel: 'model',
  });
  const router = createModelRouter({
    catalogue,
    languageModels: new Map([['model', languageModel(vendor)]]),
    policy: {
      maxTotalAttempts: 1,
      maxRetriesPerModel: 0,
      backoffBaseMs: 1,
      backoffMaxMs: 1,
      maxRetryAfterMs: 1_000,
      attemptTimeoutMs: 5_000,
      streamMaxMs: 30_000,
      breakerFailureThreshold: 100,
      breakerProbeIntervalMs: 60_000,
    },
    log: pino({ level: 'silent' }),
  });
  server.enqueue(response);
  const parts: StreamPart[] = [];
  try {
    for await (const part of router.stream({
      model: 'model',
      request: { messages: [{ role: 'user', content: 'Write it' }], tools: [writeDoc] },
      signal: new AbortController().signal,
      context: { tenantId: 't' },
    })) {
      parts.push(part);
    }
  } finally {
    router.dispose();
  }
  return parts;
}

const errorOf = (parts: StreamPart[]) => {
  const last = parts.at(-1);
  return last?.type === 'error' ? last.error : undefined;
};

describe.each(['openai', 'anthropic'] as const)('output past its bound on %s', (vendor) => {
  // Anthropic reported the call's input as its stream opened: the failed
  // attempt's usage comes before the error (RouterStream).
  const failed = vendor === 'anthropic' ? ['usage', 'error'] : ['error'];

  it('tool-call arguments far past maxOutputTokens fail the call as cut off, and become no tool call', async () => {
    // 200,000 characters of arguments for 16 tokens.
    const parts = await turn(vendor, {
      kind: 'reply',
      toolCalls: [{ name: 'write_doc', arguments: { text: 'x'.repeat(200_000) } }],
    });
    expect(parts.map((part) => part.type)).toEqual(failed);
    expect(errorOf(parts)).toMatchObject({ kind: 'stream_interrupted' });
    expect(errorOf(parts)?.detail).toContain('the tool-call arguments passed 1024 characters');
  });

  it('arguments that do not parse count as well, alone or after text', async () => {
    const alone = await turn(vendor, {
      kind: 'reply',
      toolCalls: [{ name: 'write_doc', arguments: `{"text": "${'x'.repeat(5_000)}` }],
    });
    expect(alone.map((part) => part.type)).toEqual(failed);
    expect(errorOf(alone)).toMatchObject({ kind: 'stream_interrupted' });
    const afterText = await turn(vendor, {
      kind: 'reply',
      chunks: ['y'.repeat(700)],
      toolCalls: [{ name: 'write_doc', arguments: `{"text": "${'x'.repeat(700)}` }],
    });
    expect(afterText.map((part) => part.type)).toEqual(['text-delta', ...failed]);
    expect(errorOf(afterText)).toMatchObject({ kind: 'stream_interrupted' });
  });

  it('text and tool-call arguments share the bound: each under it, together past it, the call fails', async () => {
    const parts = await turn(vendor, {
      kind: 'reply',
      chunks: ['y'.repeat(700)],
      toolCalls: [{ name: 'write_doc', arguments: { text: 'x'.repeat(700) } }],
    });
    expect(parts.map((part) => part.type)).toEqual(['text-delta', ...failed]);
    expect(errorOf(parts)).toMatchObject({ kind: 'stream_interrupted' });
  });

  it('a valid call counts its arguments as the model sent them, whitespace too, not as they re-serialize', async () => {
    // 711 characters sent, 311 once parsed and serialized again: with the text's 500, past the bound only as sent.
    const spaced = `{"text":${' '.repeat(400)}"${'x'.repeat(300)}"}`;
    const parts = await turn(vendor, {
      kind: 'reply',
      chunks: ['y'.repeat(500)],
      toolCalls: [{ name: 'write_doc', arguments: spaced }],
    });
    expect(parts.map((part) => part.type)).toEqual(['text-delta', ...failed]);
    expect(errorOf(parts)).toMatchObject({ kind: 'stream_interrupted' });
    expect(errorOf(parts)?.detail).toContain('the answer passed 1024 characters');
  });

  it('a call within the bound goes through', async () => {
    const parts = await turn(vendor, {
      kind: 'reply',
      toolCalls: [{ name: 'write_doc', arguments: { text: 'x'.repeat(900) } }],
    });
    expect(parts.find((part) => part.type === 'tool-call')).toMatchObject({
      toolCall: { name: 'write_doc', arguments: { text: 'x'.repeat(900) } },
    });
    expect(parts.at(-1)).toMatchObject({ type: 'finish', reason: 'tool_calls' });
  });
});
