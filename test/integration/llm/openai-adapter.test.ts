import pino from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { LlmError } from '../../../src/llm/errors.js';
import { createOpenAiClient, openAiModel } from '../../../src/llm/openai/index.js';
import { createProviderFetch } from '../../../src/llm/provider-fetch.js';
import type {
  LanguageModel,
  ModelRequest,
  StreamPart,
  ToolDefinition,
} from '../../../src/llm/types.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer, FakeReply, FakeResponse } from '../../fakes/provider-types.js';

let server: FakeProviderServer;
const transport = createProviderFetch();
beforeEach(async () => {
  server = await startFakeProviderServer();
});
afterEach(async () => server.close());
afterAll(() => transport.close());

function model(overrides: { idleTimeoutMs?: number } = {}): LanguageModel {
  return openAiModel({
    client: createOpenAiClient({
      apiKey: 'sk-fake',
      baseUrl: server.openaiBaseUrl,
      timeoutMs: 5_000,
      fetch: transport.fetch,
      log: pino({ level: 'silent' }),
    }),
    provider: 'openai',
    modelId: 'fake-model',
    maxOutputTokens: 512,
    idleTimeoutMs: overrides.idleTimeoutMs ?? 5_000,
  });
}

const hello: ModelRequest = {
  system: { stable: 'You are a test.', volatile: 'Now: noon.' },
  messages: [{ role: 'user', content: 'Say hello' }],
};

const getWeather: ToolDefinition = {
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: z.object({ city: z.string() }),
};
const getTime: ToolDefinition = {
  name: 'get_time',
  description: 'Time in a zone',
  parameters: z.object({ zone: z.string() }),
};

async function collect(
  stream: AsyncIterable<StreamPart>,
  onPart?: (part: StreamPart) => void,
): Promise<StreamPart[]> {
  const parts: StreamPart[] = [];
  for await (const part of stream) {
    parts.push(part);
    onPart?.(part);
  }
  return parts;
}

/** Runs a turn that must fail; returns the error and the parts seen before it. */
async function failure(
  response: FakeResponse,
  options: { idleTimeoutMs?: number } = {},
): Promise<{ error: LlmError; parts: StreamPart[] }> {
  server.enqueue(response);
  const parts: StreamPart[] = [];
  const signal = new AbortController().signal;
  const error = await collect(model(options).stream(hello, { signal }), (part) =>
    parts.push(part),
  ).then(
    () => {
      throw new Error('the turn did not fail');
    },
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(LlmError);
  return { error: error as LlmError, parts };
}

const text = (parts: StreamPart[]) =>
  parts.flatMap((part) => (part.type === 'text-delta' ? [part.text] : [])).join('');

describe('openAiModel against the fake provider', () => {
  it('streams a text answer, then usage and finish', async () => {
    server.enqueue({ kind: 'reply', text: 'Hello there, world!', usage: { input: 12, output: 4 } });
    const parts = await collect(model().stream(hello, { signal: new AbortController().signal }));

    expect(text(parts)).toBe('Hello there, world!');
    expect(parts.filter((part) => part.type === 'text-delta').length).toBeGreaterThan(1);
    expect(parts.slice(-2)).toEqual([
      {
        type: 'usage',
        usage: { inputTokens: 12, outputTokens: 4, cachedInputTokens: 0, cacheWriteTokens: 0 },
      },
      { type: 'finish', reason: 'stop', providerReason: 'stop' },
    ]);
    const [request] = server.requests;
    expect(request?.path).toBe('/v1/chat/completions');
    expect(request?.body).toMatchObject({
      model: 'fake-model',
      stream: true,
      stream_options: { include_usage: true },
      max_completion_tokens: 512,
      messages: [
        { role: 'system', content: 'You are a test.\n\nNow: noon.' },
        { role: 'user', content: 'Say hello' },
      ],
    });
  });

  it('hands each delta to the consumer before the next chunk is sent', async () => {
    const seenBeforeChunk: string[][] = [];
    let seen: string[] = [];
    let deltaSeen: () => void = () => {};
    server.enqueue({
      kind: 'reply',
      chunks: ['one ', 'two ', 'three'],
      // The fake waits here until the consumer has seen the chunk just sent: a buffering adapter deadlocks.
      betweenChunks: async (sentIndex) => {
        await new Promise<void>((resolve, reject) => {
          if (seen.length > sentIndex) return resolve();
          deltaSeen = resolve;
          setTimeout(
            () => reject(new Error(`delta ${sentIndex} never reached the consumer`)),
            3_000,
          );
        });
        seenBeforeChunk.push([...seen]);
      },
    });
    await collect(model().stream(hello, { signal: new AbortController().signal }), (part) => {
      if (part.type !== 'text-delta') return;
      seen = [...seen, part.text];
      deltaSeen();
    });
    expect(seenBeforeChunk).toEqual([['one '], ['one ', 'two ']]);
    expect(seen).toEqual(['one ', 'two ', 'three']);
  });

  it('assembles parallel tool calls and validates their arguments', async () => {
    server.enqueue({
      kind: 'reply',
      text: 'Checking both.',
      toolCalls: [
        { id: 'call_w', name: 'get_weather', arguments: { city: 'Oslo' } },
        { id: 'call_t', name: 'get_time', arguments: { zone: 'Europe/Rome' } },
      ],
    });
    const request: ModelRequest = { ...hello, tools: [getWeather, getTime] };
    const parts = await collect(model().stream(request, { signal: new AbortController().signal }));

    expect(text(parts)).toBe('Checking both.');
    expect(parts.filter((part) => part.type !== 'text-delta')).toEqual([
      {
        type: 'tool-call',
        toolCall: { id: 'call_w', name: 'get_weather', arguments: { city: 'Oslo' } },
        argumentChars: '{"city":"Oslo"}'.length,
      },
      {
        type: 'tool-call',
        toolCall: { id: 'call_t', name: 'get_time', arguments: { zone: 'Europe/Rome' } },
        argumentChars: '{"zone":"Europe/Rome"}'.length,
      },
      expect.objectContaining({ type: 'usage' }),
      { type: 'finish', reason: 'tool_calls', providerReason: 'tool_calls' },
    ]);
    expect(server.requests[0]?.body).toMatchObject({
      tool_choice: 'auto',
      tools: [
        { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
        { type: 'function', function: { name: 'get_time' } },
      ],
    });
  });

  it('reads the same parts whatever the line ends and however the bytes are split', async () => {
    const reply: FakeReply = {
      kind: 'reply',
      chunks: ['Héllo ', 'wörld ✓ ', '🎉'],
      toolCalls: [{ id: 'call_w', name: 'get_weather', arguments: { city: 'Škofja Loka' } }],
    };
    const request: ModelRequest = { ...hello, tools: [getWeather] };
    const read = async (onWire?: FakeReply['onWire']) => {
      server.enqueue({ ...reply, ...(onWire ? { onWire } : {}) });
      return collect(model().stream(request, { signal: new AbortController().signal }));
    };
    const plain = await read();
    expect(text(plain)).toBe('Héllo wörld ✓ 🎉');
    expect(plain).toContainEqual(expect.objectContaining({ type: 'tool-call' }));
    expect(await read({ lineEnd: '\r\n', writeBytes: 3 })).toEqual(plain);
    expect(await read({ lineEnd: '\r', writeBytes: 5 })).toEqual(plain);
  });

  it('reports malformed or mismatching tool arguments as tool-call-invalid', async () => {
    server.enqueue({
      kind: 'reply',
      toolCalls: [
        { id: 'call_bad', name: 'get_weather', arguments: '{"city": "Oslo"' },
        { id: 'call_wrong', name: 'get_weather', arguments: { city: 3 } },
      ],
    });
    const request: ModelRequest = { ...hello, tools: [getWeather] };
    const parts = await collect(model().stream(request, { signal: new AbortController().signal }));
    const invalid = parts.filter((part) => part.type === 'tool-call-invalid');
    expect(invalid).toEqual([
      expect.objectContaining({
        id: 'call_bad',
        name: 'get_weather',
        rawArguments: '{"city": "Oslo"',
        reason: expect.stringContaining('not valid JSON'),
      }),
      expect.objectContaining({
        id: 'call_wrong',
        rawArguments: '{"city":3}',
        reason: expect.stringContaining('city'),
      }),
    ]);
    expect(parts.at(-1)).toEqual({
      type: 'finish',
      reason: 'tool_calls',
      providerReason: 'tool_calls',
    });
  });

  it('sends tool calls and their results back in the next request', async () => {
    server.enqueue({ kind: 'reply', text: 'Oslo: 3 °C, Rome: 14:00.' });
    const request: ModelRequest = {
      tools: [getWeather, getTime],
      messages: [
        { role: 'user', content: 'Weather in Oslo, time in Rome?' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [
            { id: 'call_w', name: 'get_weather', arguments: { city: 'Oslo' } },
            { id: 'call_t', name: 'get_time', arguments: { zone: 'Europe/Rome' } },
          ],
        },
        { role: 'tool', toolCallId: 'call_w', toolName: 'get_weather', content: '3 °C' },
        { role: 'tool', toolCallId: 'call_t', toolName: 'get_time', content: '14:00' },
      ],
    };
    const parts = await collect(model().stream(request, { signal: new AbortController().signal }));
    expect(text(parts)).toBe('Oslo: 3 °C, Rome: 14:00.');
    expect(server.requests[0]?.body.messages).toEqual([
      { role: 'user', content: 'Weather in Oslo, time in Rome?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_w',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
          },
          {
            id: 'call_t',
            type: 'function',
            function: { name: 'get_time', arguments: '{"zone":"Europe/Rome"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_w', content: '3 °C' },
      { role: 'tool', tool_call_id: 'call_t', content: '14:00' },
    ]);
  });

  it('reports usage with cached input tokens', async () => {
    server.enqueue({
      kind: 'reply',
      text: 'ok',
      usage: { input: 2048, output: 7, cacheRead: 1536 },
    });
    const parts = await collect(model().stream(hello, { signal: new AbortController().signal }));
    expect(parts.find((part) => part.type === 'usage')).toEqual({
      type: 'usage',
      usage: { inputTokens: 2048, cachedInputTokens: 1536, outputTokens: 7, cacheWriteTokens: 0 },
    });
  });

  it('maps the finish reasons length and content_filter', async () => {
    server.enqueue({ kind: 'reply', text: 'cut sho', finish: 'length' });
    server.enqueue({ kind: 'reply', text: '', finish: 'content_filter' });
    const signal = new AbortController().signal;
    expect((await collect(model().stream(hello, { signal }))).at(-1)).toEqual({
      type: 'finish',
      reason: 'length',
      providerReason: 'length',
    });
    expect((await collect(model().stream(hello, { signal }))).at(-1)).toMatchObject({
      reason: 'content_filter',
    });
  });
});

describe('openAiModel failures', () => {
  it('maps 429 to rate_limited with retry-after', async () => {
    const { error } = await failure({
      kind: 'error',
      status: 429,
      headers: { 'retry-after': '3' },
    });
    expect(error).toMatchObject({ kind: 'rate_limited', providerStatus: 429, retryAfterMs: 3000 });
    expect(error.detail).toContain('Rate limit reached');
  });

  it.each([
    [{ kind: 'error', status: 500 }, 'server_error'],
    [{ kind: 'error', status: 503 }, 'overloaded'],
    [{ kind: 'error', status: 400, type: 'context_length' }, 'context_length_exceeded'],
    [{ kind: 'error', status: 400 }, 'invalid_request'],
    [{ kind: 'error', status: 401 }, 'authentication'],
    [{ kind: 'reset' }, 'connection'],
  ] satisfies [FakeResponse, string][])('maps %j to %s', async (response, kind) => {
    const { error } = await failure(response);
    expect(error.kind).toBe(kind);
    expect(error).toMatchObject({ provider: 'openai', model: 'fake-model' });
  });

  it('refuses a redirect as invalid_request and never asks where it points', async () => {
    const { error } = await failure({
      kind: 'error',
      status: 307,
      headers: { location: `${server.openaiBaseUrl}/chat/completions` },
    });
    expect(error).toMatchObject({ kind: 'invalid_request', retryable: false });
    expect(error.detail).toContain('redirect');
    expect(server.requests).toHaveLength(1);
  });

  it('maps an error inside the stream to overloaded or server_error, after the text before it', async () => {
    const overloaded = await failure({ kind: 'stream-error', afterChunks: ['Hel', 'lo'] });
    expect(overloaded.error.kind).toBe('overloaded');
    expect(text(overloaded.parts)).toBe('Hello');
    const server_ = await failure({ kind: 'stream-error', type: 'server', afterChunks: ['x'] });
    expect(server_.error.kind).toBe('server_error');
  });

  it('maps a stream that ends without a finish reason to stream_interrupted', async () => {
    const { error, parts } = await failure({ kind: 'cut', afterChunks: ['Half an ', 'answer'] });
    expect(error.kind).toBe('stream_interrupted');
    expect(text(parts)).toBe('Half an answer');
  });

  it('times out a stalled stream with the idle watchdog and closes the request', async () => {
    const started = Date.now();
    const { error, parts } = await failure(
      { kind: 'stall', afterChunks: ['Thinking'] },
      { idleTimeoutMs: 200 },
    );
    expect(error).toMatchObject({ kind: 'timeout', retryable: true });
    expect(text(parts)).toBe('Thinking');
    expect(Date.now() - started).toBeLessThan(3_000);
    await vi.waitFor(() => expect(server.abortedRequests()).toBe(1));
  });

  it('throws cancelled when the caller aborts mid-stream, and the server sees the abort', async () => {
    server.enqueue({ kind: 'reply', chunks: ['a', 'b', 'c', 'd', 'e', 'f'], chunkDelayMs: 50 });
    const controller = new AbortController();
    const error = await collect(model().stream(hello, { signal: controller.signal }), (part) => {
      if (part.type === 'text-delta') controller.abort();
    }).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(LlmError);
    expect(error).toMatchObject({ kind: 'cancelled', retryable: false });
    await vi.waitFor(() => expect(server.abortedRequests()).toBe(1));
  });

  it('throws the abort reason when it is an LlmError', async () => {
    server.enqueue({ kind: 'stall' });
    const controller = new AbortController();
    const deadline = new LlmError({ kind: 'timeout', provider: 'router', model: 'fake-model' });
    void server.nextRequest().then(() => setTimeout(() => controller.abort(deadline), 50));
    const error = await collect(model().stream(hello, { signal: controller.signal })).catch(
      (thrown: unknown) => thrown,
    );
    expect(error).toBe(deadline);
  });
});
