import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { anthropicModel, createAnthropicClient } from '../../../src/llm/anthropic/index.js';
import { LlmError } from '../../../src/llm/errors.js';
import { createProviderFetch } from '../../../src/llm/provider-fetch.js';
import type {
  LanguageModel,
  ModelRequest,
  StreamPart,
  ToolDefinition,
} from '../../../src/llm/types.js';
import { type FakeProviderServer, startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeReply } from '../../fakes/provider-types.js';

/** The adapter through the real SDK against the fake provider's Anthropic wire. */

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

function model(idleTimeoutMs = 5_000): LanguageModel {
  const client = createAnthropicClient({
    apiKey: 'test-key',
    baseUrl: server.anthropicBaseUrl,
    timeoutMs: 5_000,
    fetch: transport.fetch,
    log: pino({ level: 'silent' }),
  });
  return anthropicModel({
    client,
    provider: 'anthropic',
    modelId: 'claude-test',
    maxOutputTokens: 2048,
    idleTimeoutMs,
  });
}

const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'Current weather of a city',
  parameters: z.object({ city: z.string() }),
};

const hello: ModelRequest = { messages: [{ role: 'user', content: 'Hello' }] };

async function collect(
  request: ModelRequest,
  options: {
    model?: LanguageModel;
    signal?: AbortSignal;
    onPart?: (part: StreamPart) => void;
  } = {},
): Promise<{ parts: StreamPart[]; error: LlmError | undefined }> {
  const parts: StreamPart[] = [];
  const signal = options.signal ?? new AbortController().signal;
  try {
    for await (const part of (options.model ?? model()).stream(request, { signal })) {
      parts.push(part);
      options.onPart?.(part);
    }
    return { parts, error: undefined };
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    return { parts, error };
  }
}

const textOf = (parts: StreamPart[]) =>
  parts.map((part) => (part.type === 'text-delta' ? part.text : '')).join('');

function lastRequestBody() {
  const request = server.requests.at(-1);
  if (!request) throw new Error('no request was recorded');
  return request.body;
}

describe('anthropic adapter: replies', () => {
  it('streams text, then usage and finish', async () => {
    server.enqueue({ kind: 'reply', text: 'Hello there, world.' });
    const { parts, error } = await collect(hello);
    expect(error).toBeUndefined();
    expect(textOf(parts)).toBe('Hello there, world.');
    expect(parts.filter((part) => part.type === 'text-delta').length).toBeGreaterThan(1);
    expect(parts.slice(-2)).toEqual([
      {
        type: 'usage',
        usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 0, cacheWriteTokens: 0 },
      },
      { type: 'finish', reason: 'stop', providerReason: 'end_turn' },
    ]);
    const body = lastRequestBody();
    expect(body).toMatchObject({ model: 'claude-test', stream: true, max_tokens: 2048 });
  });

  it('hands each delta to the consumer before the next chunk is sent', async () => {
    let firstSeen!: () => void;
    const seen = new Promise<void>((resolve) => {
      firstSeen = resolve;
    });
    let waitedInVain = false;
    server.enqueue({
      kind: 'reply',
      chunks: ['one ', 'two ', 'three'],
      betweenChunks: async (sentIndex) => {
        if (sentIndex !== 0) return;
        const timeout = new Promise<'timeout'>((resolve) => setTimeout(resolve, 3_000, 'timeout'));
        waitedInVain = (await Promise.race([seen, timeout])) === 'timeout';
      },
    });
    const { parts } = await collect(hello, {
      onPart: (part) => {
        if (part.type === 'text-delta') firstSeen();
      },
    });
    expect(waitedInVain).toBe(false);
    expect(textOf(parts)).toBe('one two three');
  });

  it('assembles parallel tool_use blocks and validates their arguments', async () => {
    server.enqueue({
      kind: 'reply',
      text: 'Checking both.',
      toolCalls: [
        { id: 'toolu_oslo', name: 'get_weather', arguments: { city: 'Oslo' } },
        { id: 'toolu_rome', name: 'get_weather', arguments: { city: 'Rome' } },
      ],
    });
    const { parts, error } = await collect({ ...hello, tools: [weather] });
    expect(error).toBeUndefined();
    expect(parts.filter((part) => part.type === 'tool-call')).toEqual([
      {
        type: 'tool-call',
        toolCall: { id: 'toolu_oslo', name: 'get_weather', arguments: { city: 'Oslo' } },
        argumentChars: '{"city":"Oslo"}'.length,
      },
      {
        type: 'tool-call',
        toolCall: { id: 'toolu_rome', name: 'get_weather', arguments: { city: 'Rome' } },
        argumentChars: '{"city":"Rome"}'.length,
      },
    ]);
    expect(parts.at(-1)).toEqual({
      type: 'finish',
      reason: 'tool_calls',
      providerReason: 'tool_use',
    });
    expect(lastRequestBody()).toMatchObject({
      tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
      tool_choice: { type: 'auto' },
    });
  });

  it('reads the same parts whatever the line ends and however the bytes are split', async () => {
    const reply: FakeReply = {
      kind: 'reply',
      chunks: ['Héllo ', 'wörld ✓ ', '🎉'],
      toolCalls: [{ id: 'toolu_w', name: 'get_weather', arguments: { city: 'Škofja Loka' } }],
    };
    const read = async (onWire?: FakeReply['onWire']) => {
      server.enqueue({ ...reply, ...(onWire ? { onWire } : {}) });
      return collect({ ...hello, tools: [weather] });
    };
    const plain = await read();
    expect(plain.error).toBeUndefined();
    expect(textOf(plain.parts)).toBe('Héllo wörld ✓ 🎉');
    expect(plain.parts).toContainEqual(expect.objectContaining({ type: 'tool-call' }));
    expect(await read({ lineEnd: '\r\n', writeBytes: 3 })).toEqual(plain);
    expect(await read({ lineEnd: '\r', writeBytes: 5 })).toEqual(plain);
  });

  it('reports malformed or schema-failing arguments as tool-call-invalid', async () => {
    server.enqueue({
      kind: 'reply',
      toolCalls: [
        { id: 'toolu_bad', name: 'get_weather', arguments: '{"city": "Os' },
        { id: 'toolu_wrong', name: 'get_weather', arguments: { town: 'Oslo' } },
      ],
    });
    const { parts, error } = await collect({ ...hello, tools: [weather] });
    expect(error).toBeUndefined();
    const invalid = parts.filter((part) => part.type === 'tool-call-invalid');
    expect(invalid).toMatchObject([
      { id: 'toolu_bad', name: 'get_weather', rawArguments: '{"city": "Os' },
      { id: 'toolu_wrong', name: 'get_weather', rawArguments: '{"town":"Oslo"}' },
    ]);
    expect(invalid[0]).toMatchObject({ reason: expect.stringContaining('not valid JSON') });
    expect(parts.some((part) => part.type === 'tool-call')).toBe(false);
  });

  it('sends tool results first in one user message, the user text after them', async () => {
    server.enqueue({ kind: 'reply', text: 'Oslo is cold.' });
    await collect({
      tools: [weather],
      messages: [
        { role: 'user', content: 'Weather in Oslo and Rome?' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [
            { id: 'toolu_1', name: 'get_weather', arguments: { city: 'Oslo' } },
            { id: 'toolu_2', name: 'get_weather', arguments: { city: 'Rome' } },
          ],
        },
        { role: 'tool', toolCallId: 'toolu_1', toolName: 'get_weather', content: '3°C' },
        {
          role: 'tool',
          toolCallId: 'toolu_2',
          toolName: 'get_weather',
          content: 'down',
          isError: true,
        },
        { role: 'user', content: 'Be brief.' },
      ],
    });
    expect(lastRequestBody().messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo and Rome?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } },
          { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: '3°C', is_error: false },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: 'down', is_error: true },
          { type: 'text', text: 'Be brief.' },
        ],
      },
    ]);
  });

  it('marks the stable system block for the prompt cache and reports cache usage', async () => {
    server.enqueue({
      kind: 'reply',
      text: 'Cached.',
      usage: { input: 20, output: 7, cacheRead: 1_000, cacheWrite: 50 },
    });
    const { parts } = await collect({
      ...hello,
      system: { stable: 'You are Waymark.', volatile: 'Budget left: 3 calls.' },
    });
    expect(lastRequestBody().system).toEqual([
      { type: 'text', text: 'You are Waymark.', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Budget left: 3 calls.' },
    ]);
    expect(parts.find((part) => part.type === 'usage')).toEqual({
      type: 'usage',
      usage: {
        inputTokens: 1_070,
        outputTokens: 7,
        cachedInputTokens: 1_000,
        cacheWriteTokens: 50,
      },
    });
  });
});

describe('anthropic adapter: faults', () => {
  it.each([
    [500, 'server_error'],
    [529, 'overloaded'],
    [401, 'authentication'],
  ] as const)('HTTP %i -> %s', async (status, kind) => {
    server.enqueue({ kind: 'error', status });
    const { error } = await collect(hello);
    expect(error).toMatchObject({
      kind,
      provider: 'anthropic',
      model: 'claude-test',
      providerStatus: status,
    });
  });

  it('429 with retry-after -> rate_limited with retryAfterMs', async () => {
    server.enqueue({ kind: 'error', status: 429, headers: { 'retry-after': '2' } });
    const before = server.requests.length;
    const { error } = await collect(hello);
    expect(error).toMatchObject({ kind: 'rate_limited', retryAfterMs: 2_000, retryable: true });
    // The SDK's own retries are off: the router is the one retry layer.
    expect(server.requests.length).toBe(before + 1);
  });

  it('400 prompt too long -> context_length_exceeded', async () => {
    server.enqueue({ kind: 'error', status: 400, type: 'context_length' });
    const { error } = await collect(hello);
    expect(error).toMatchObject({ kind: 'context_length_exceeded', retryable: false });
  });

  it('400 input plus max_tokens over the context limit -> context_length_exceeded', async () => {
    server.enqueue({
      kind: 'error',
      status: 400,
      body: {
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message:
            'input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again',
        },
      },
    });
    const { error } = await collect(hello);
    expect(error).toMatchObject({ kind: 'context_length_exceeded', retryable: false });
  });

  it('an error event inside a 200 stream -> overloaded, after the text before it', async () => {
    server.enqueue({ kind: 'stream-error', afterChunks: ['partial '], type: 'overloaded' });
    const { parts, error } = await collect(hello);
    expect(textOf(parts)).toBe('partial ');
    expect(error).toMatchObject({ kind: 'overloaded', providerStatus: undefined });
  });

  it('a redirect -> invalid_request, and its target is never asked', async () => {
    server.enqueue({
      kind: 'error',
      status: 308,
      headers: { location: `${server.anthropicBaseUrl}/v1/messages` },
    });
    const before = server.requests.length;
    const { error } = await collect(hello);
    expect(error).toMatchObject({ kind: 'invalid_request', retryable: false });
    expect(error?.detail).toContain('redirect');
    expect(server.requests.length).toBe(before + 1);
  });

  it('a reset connection -> connection', async () => {
    server.enqueue({ kind: 'reset' });
    const { error } = await collect(hello);
    expect(error?.kind).toBe('connection');
  });

  it('a stream cut before message_stop -> stream_interrupted', async () => {
    server.enqueue({ kind: 'cut', afterChunks: ['half an ', 'answ'] });
    const { parts, error } = await collect(hello);
    expect(textOf(parts)).toBe('half an answ');
    expect(error?.kind).toBe('stream_interrupted');
    expect(parts.some((part) => part.type === 'finish')).toBe(false);
  });

  it('a stalled stream -> timeout from the idle watchdog', async () => {
    server.enqueue({ kind: 'stall', afterChunks: ['waiting'] });
    const started = Date.now();
    const { parts, error } = await collect(hello, { model: model(200) });
    expect(textOf(parts)).toBe('waiting');
    expect(error).toMatchObject({ kind: 'timeout', retryable: true });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('cancelling mid-stream -> cancelled, and the request is aborted', async () => {
    const abortedBefore = server.abortedRequests();
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    server.enqueue({
      kind: 'reply',
      chunks: ['first ', 'second'],
      betweenChunks: () => released,
    });
    const controller = new AbortController();
    const { parts, error } = await collect(hello, {
      signal: controller.signal,
      onPart: () => controller.abort(),
    });
    release();
    expect(textOf(parts)).toBe('first ');
    expect(error).toMatchObject({ kind: 'cancelled', retryable: false });
    await vi.waitFor(() => expect(server.abortedRequests()).toBe(abortedBefore + 1));
  });

  it('an already aborted signal -> cancelled without a request', async () => {
    const controller = new AbortController();
    controller.abort();
    const before = server.requests.length;
    const { error } = await collect(hello, { signal: controller.signal });
    expect(error?.kind).toBe('cancelled');
    expect(server.requests.length).toBe(before);
  });
});
