import { once } from 'node:events';
import net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  type FakeProviderServer,
  NO_RESPONSE_ENQUEUED,
  startFakeProviderServer,
} from '../../fakes/provider-server.js';
import type { FakeReply } from '../../fakes/provider-types.js';

/**
 * The fake provider is only worth something if the real SDKs parse what it
 * sends exactly as they parse the vendors. Every test here goes through the
 * real `openai` and `@anthropic-ai/sdk` clients (no retries) over a socket.
 */

let fake: FakeProviderServer;
beforeEach(async () => {
  fake = await startFakeProviderServer();
});
afterEach(async () => fake.close());

type Vendor = 'openai' | 'anthropic';
const SDKS = { openai: OpenAI, anthropic: Anthropic };

function openai(maxRetries = 0): OpenAI {
  return new OpenAI({ apiKey: 'sk-test', baseURL: fake.openaiBaseUrl, maxRetries });
}

function anthropic(maxRetries = 0): Anthropic {
  return new Anthropic({ apiKey: 'test-key', baseURL: fake.anthropicBaseUrl, maxRetries });
}

const chat = { model: 'gpt-fake', messages: [{ role: 'user' as const, content: 'Hi' }] };
const message = {
  model: 'claude-fake',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'Hi' }],
};

/** Streams one request through the vendor's SDK and yields its text deltas. */
async function* streamedText(vendor: Vendor, signal?: AbortSignal): AsyncGenerator<string> {
  if (vendor === 'openai') {
    const stream = await openai().chat.completions.create({ ...chat, stream: true }, { signal });
    for await (const chunk of stream) {
      const text = chunk.choices[0]?.delta.content;
      if (text) yield text;
    }
    return;
  }
  const stream = await anthropic().messages.create({ ...message, stream: true }, { signal });
  for await (const event of stream) {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
      yield event.delta.text;
    }
  }
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const collected: T[] = [];
  for await (const item of items) collected.push(item);
  return collected;
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

/** Rejects after `ms` instead of hanging the test until its timeout. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Node's one write path under `socket.write` and corked writes alike; not in its typings. */
type SocketWrites = { _writeGeneric(...args: unknown[]): void };

/**
 * One streamed request over a raw socket, read to its end; also counts the
 * writes the fake's side of the connection made to answer it.
 */
async function streamedRequestWrites(vendor: Vendor): Promise<{ text: string; writes: number }> {
  const url = new URL(
    vendor === 'openai'
      ? `${fake.openaiBaseUrl}/chat/completions`
      : `${fake.anthropicBaseUrl}/v1/messages`,
  );
  const body = JSON.stringify(
    vendor === 'openai' ? { ...chat, stream: true } : { ...message, stream: true },
  );
  const socket = net.connect(Number(url.port), url.hostname);
  const writes = vi.spyOn(net.Socket.prototype as unknown as SocketWrites, '_writeGeneric');
  try {
    socket.write(
      `POST ${url.pathname} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    await once(socket, 'end');
    const byServer = writes.mock.contexts.filter((context) => context !== socket).length;
    return { text, writes: byServer };
  } finally {
    writes.mockRestore();
    socket.destroy();
  }
}

describe.each(['openai', 'anthropic'] as const)('both APIs (%s)', (vendor) => {
  it('text without chunks streams as word-sized deltas', async () => {
    fake.enqueue({ kind: 'reply', text: 'The quick brown fox' });
    expect(await collect(streamedText(vendor))).toEqual(['The ', 'quick ', 'brown ', 'fox']);
  });

  it('betweenChunks: the consumer sees chunk 0 before chunk 1 is sent', async () => {
    const log: string[] = [];
    let sawChunk0!: () => void;
    const chunk0Seen = new Promise<void>((resolve) => {
      sawChunk0 = resolve;
    });
    fake.enqueue({
      kind: 'reply',
      chunks: ['one ', 'two ', 'three'],
      betweenChunks: async (sentIndex) => {
        if (sentIndex !== 0) return;
        await within(chunk0Seen, 5_000, 'the consumer seeing chunk 0');
        log.push('server resumes');
      },
    });
    for await (const text of streamedText(vendor)) {
      log.push(`client got ${text}`);
      if (text === 'one ') sawChunk0();
    }
    expect(log).toEqual([
      'client got one ',
      'server resumes',
      'client got two ',
      'client got three',
    ]);
  });

  it('delivery burst: headers and the whole stream go out in one write, parsed as the same deltas', async () => {
    const reply: FakeReply = { kind: 'reply', chunks: ['one ', 'two'], delivery: 'burst' };
    fake.enqueue(reply);
    expect(await collect(streamedText(vendor))).toEqual(['one ', 'two']);
    fake.enqueue(reply);
    const burst = await streamedRequestWrites(vendor);
    expect(burst.text).toMatch(/^HTTP\/1\.1 200/);
    expect(burst.text).toContain(vendor === 'openai' ? 'data: [DONE]' : 'event: message_stop');
    expect(burst.writes).toBe(1);
    // The default, frame by frame, for comparison: headers, then each frame.
    fake.enqueue({ ...reply, delivery: 'frames' });
    expect((await streamedRequestWrites(vendor)).writes).toBeGreaterThan(3);
  });

  it('a burst reply cannot be paced', () => {
    expect(() =>
      fake.enqueue({ kind: 'reply', chunks: ['a', 'b'], delivery: 'burst', chunkDelayMs: 5 }),
    ).toThrow('cannot be paced');
    expect(fake.pendingResponses()).toBe(0);
  });

  it('firstByteDelayMs and chunkDelayMs pace the answer', async () => {
    fake.enqueue({
      kind: 'reply',
      chunks: ['a', 'b', 'c'],
      firstByteDelayMs: 40,
      chunkDelayMs: 20,
    });
    const started = performance.now();
    expect(await collect(streamedText(vendor))).toEqual(['a', 'b', 'c']);
    // 40 + 2 × 20 ms; a lower bound only, so a slow machine cannot fail it.
    expect(performance.now() - started).toBeGreaterThanOrEqual(70);
  });

  it('reset: the SDK reports a connection error, also on a reused keep-alive connection', async () => {
    fake.enqueue({ kind: 'reply', text: 'ok' }, { kind: 'reset' });
    await collect(streamedText(vendor));
    const error = await rejectionOf(collect(streamedText(vendor)));
    expect(error).toBeInstanceOf(SDKS[vendor].APIConnectionError);
    expect(fake.requests).toHaveLength(2);
    expect(fake.abortedRequests()).toBe(0);
  });

  it('stall: nothing after the partial text until the client aborts, which the fake counts', async () => {
    fake.enqueue({ kind: 'stall', afterChunks: ['partial '] });
    const controller = new AbortController();
    const received: string[] = [];
    // Both SDKs end the iteration quietly, without throwing, when the caller aborts.
    for await (const text of streamedText(vendor, controller.signal)) {
      received.push(text);
      setTimeout(() => controller.abort(), 20);
    }
    expect(received).toEqual(['partial ']);
    expect(controller.signal.aborted).toBe(true);
    await vi.waitFor(() => expect(fake.abortedRequests()).toBe(1));
  });

  it('close() ends a stalled response; the SDK stream fails with "terminated"', async () => {
    fake.enqueue({ kind: 'stall', afterChunks: ['partial '] });
    const arrived = fake.nextRequest();
    const received: string[] = [];
    const consumed = rejectionOf(
      (async () => {
        for await (const text of streamedText(vendor)) received.push(text);
      })(),
    );
    await arrived;
    await vi.waitFor(() => expect(received).toEqual(['partial ']));
    await within(fake.close(), 2_000, 'closing with a stalled response');
    // Mid-stream disconnects reach the caller as undici's bare TypeError, not an SDK error class.
    const error = await within(consumed, 2_000, 'the client noticing the close');
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe('terminated');
    expect(fake.abortedRequests()).toBe(0);
  });

  it('an empty queue answers 500 "no response enqueued", and the SDK does not retry it', async () => {
    const call =
      vendor === 'openai'
        ? openai(2).chat.completions.create(chat)
        : anthropic(2).messages.create(message);
    const error = await rejectionOf(call);
    expect(error).toBeInstanceOf(SDKS[vendor].InternalServerError);
    expect((error as Error).message).toContain(NO_RESPONSE_ENQUEUED);
    expect(fake.requests).toHaveLength(1);
  });
});

describe('OpenAI Chat Completions', () => {
  it('a script that throws drops the connection and makes close() reject', async () => {
    const own = await startFakeProviderServer();
    own.enqueue({
      kind: 'reply',
      chunks: ['a', 'b'],
      betweenChunks: async () => {
        throw new Error('script bug');
      },
    });
    const client = new OpenAI({ apiKey: 'sk-test', baseURL: own.openaiBaseUrl, maxRetries: 0 });
    const stream = await client.chat.completions.create({ ...chat, stream: true });
    expect(await rejectionOf(collect(stream))).toBeInstanceOf(TypeError);
    await expect(own.close()).rejects.toThrow('script bug');
  });

  it('non-streamed text: message, finish reason and usage', async () => {
    fake.enqueue({ kind: 'reply', text: 'Hello there', usage: { input: 12, output: 3 } });
    const completion = await openai().chat.completions.create(chat);
    expect(completion.model).toBe('gpt-fake');
    expect(completion.choices[0]).toMatchObject({
      message: { role: 'assistant', content: 'Hello there' },
      finish_reason: 'stop',
    });
    expect(completion.usage).toMatchObject({
      prompt_tokens: 12,
      completion_tokens: 3,
      total_tokens: 15,
    });
  });

  it('non-streamed tool calls carry their arguments as JSON text', async () => {
    fake.enqueue({
      kind: 'reply',
      toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }],
    });
    const completion = await openai().chat.completions.create(chat);
    expect(completion.choices[0]?.finish_reason).toBe('tool_calls');
    expect(completion.choices[0]?.message.content).toBeNull();
    expect(completion.choices[0]?.message.tool_calls).toEqual([
      {
        id: 'call_1',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      },
    ]);
  });

  it('streamed text arrives as the scripted deltas, then finish_reason stop', async () => {
    fake.enqueue({ kind: 'reply', chunks: ['Hel', 'lo, ', 'world'], finish: 'length' });
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    const chunks = await collect(stream);
    const deltas = chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || []);
    expect(deltas).toEqual(['Hel', 'lo, ', 'world']);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('length');
  });

  it('streamed parallel tool calls assemble by index into the scripted arguments', async () => {
    const weatherArguments = { city: 'Paris', days: 3, units: { temperature: 'celsius' } };
    const searchArguments = '{"query":"caf\u00e9 \\"open now\\"","limit":5}';
    fake.enqueue({
      kind: 'reply',
      text: 'Let me check.',
      toolCalls: [
        { id: 'call_weather', name: 'get_weather', arguments: weatherArguments },
        { name: 'search', arguments: searchArguments },
      ],
    });
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    const calls = new Map<
      number,
      { id?: string; name?: string; arguments: string; deltas: number }
    >();
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      text += choice?.delta.content ?? '';
      finish = choice?.finish_reason ?? finish;
      for (const delta of choice?.delta.tool_calls ?? []) {
        const call = calls.get(delta.index) ?? { arguments: '', deltas: 0 };
        call.id ??= delta.id;
        call.name ??= delta.function?.name;
        if (delta.function?.arguments) {
          call.arguments += delta.function.arguments;
          call.deltas += 1;
        }
        calls.set(delta.index, call);
      }
    }
    expect(text).toBe('Let me check.');
    expect(finish).toBe('tool_calls');
    expect([...calls.keys()]).toEqual([0, 1]);
    expect(calls.get(0)).toMatchObject({ id: 'call_weather', name: 'get_weather' });
    expect(JSON.parse(calls.get(0)?.arguments ?? '')).toEqual(weatherArguments);
    expect(calls.get(1)).toMatchObject({ id: expect.stringMatching(/^call_/), name: 'search' });
    expect(calls.get(1)?.arguments).toBe(searchArguments);
    for (const call of calls.values()) expect(call.deltas).toBeGreaterThan(1);
  });

  it('malformed raw arguments go out verbatim', async () => {
    fake.enqueue({
      kind: 'reply',
      toolCalls: [{ name: 'get_weather', arguments: '{"city": "Par' }],
    });
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    const chunks = await collect(stream);
    const text = chunks
      .flatMap((chunk) => chunk.choices[0]?.delta.tool_calls ?? [])
      .map((delta) => delta.function?.arguments ?? '')
      .join('');
    expect(text).toBe('{"city": "Par');
  });

  it('usage with cached tokens comes in a final chunk only when include_usage is set', async () => {
    const usage = { input: 1200, output: 42, cacheRead: 1024 };
    fake.enqueue({ kind: 'reply', text: 'ok', usage }, { kind: 'reply', text: 'ok', usage });
    const withUsage = await collect(
      await openai().chat.completions.create({
        ...chat,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    const last = withUsage.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toMatchObject({
      prompt_tokens: 1200,
      completion_tokens: 42,
      total_tokens: 1242,
      prompt_tokens_details: { cached_tokens: 1024 },
    });
    expect(withUsage.slice(0, -1).every((chunk) => chunk.usage === null)).toBe(true);

    const withoutUsage = await collect(
      await openai().chat.completions.create({ ...chat, stream: true }),
    );
    expect(withoutUsage.some((chunk) => chunk.usage)).toBe(false);
  });

  it.each([
    {
      status: 429,
      headers: { 'retry-after': '2', 'retry-after-ms': '1500' },
      errorClass: OpenAI.RateLimitError,
      code: 'rate_limit_exceeded',
    },
    { status: 500, errorClass: OpenAI.InternalServerError, code: null },
    { status: 503, errorClass: OpenAI.InternalServerError, code: null },
    {
      status: 400,
      type: 'context_length' as const,
      errorClass: OpenAI.BadRequestError,
      code: 'context_length_exceeded',
    },
    { status: 401, errorClass: OpenAI.AuthenticationError, code: 'invalid_api_key' },
  ])('HTTP $status surfaces as $errorClass.name with its code and headers', async (row) => {
    fake.enqueue({ kind: 'error', status: row.status, type: row.type, headers: row.headers });
    const error = await rejectionOf(openai().chat.completions.create(chat));
    expect(error).toBeInstanceOf(row.errorClass);
    const apiError = error as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(row.status);
    expect(apiError.code).toBe(row.code);
    expect(apiError.headers?.get('x-request-id')).toMatch(/^req_/);
    for (const [name, value] of Object.entries(row.headers ?? {})) {
      expect(apiError.headers?.get(name)).toBe(value);
    }
  });

  it('an error chunk inside a 200 stream makes the SDK stream throw after the text', async () => {
    fake.enqueue({ kind: 'stream-error', afterChunks: ['Half ', 'an '], type: 'server' });
    const received: string[] = [];
    const error = await rejectionOf(
      (async () => {
        for await (const text of streamedText('openai')) received.push(text);
      })(),
    );
    expect(received).toEqual(['Half ', 'an ']);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain('The server had an error');
  });

  it('cut: the SDK stream simply ends, with no finish reason', async () => {
    fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const chunks = await collect(await openai().chat.completions.create({ ...chat, stream: true }));
    expect(chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || [])).toEqual([
      'Half ',
      'an ',
    ]);
    expect(chunks.some((chunk) => chunk.choices[0]?.finish_reason)).toBe(false);
  });

  it('records each request: api, path, headers and the parsed body', async () => {
    fake.enqueue({ kind: 'reply', text: 'ok' });
    const arrived = fake.nextRequest();
    await collect(await openai().chat.completions.create({ ...chat, stream: true }));
    const recorded = await arrived;
    expect(fake.requests).toEqual([recorded]);
    expect(recorded).toMatchObject({
      api: 'openai',
      path: '/v1/chat/completions',
      body: { model: 'gpt-fake', stream: true, messages: [{ role: 'user', content: 'Hi' }] },
    });
    expect(recorded.headers.authorization).toBe('Bearer sk-test');
    expect(recorded.receivedAt).toBeLessThanOrEqual(Date.now());
  });
});

describe('Anthropic Messages', () => {
  it('non-streamed text: content, stop reason and usage', async () => {
    fake.enqueue({ kind: 'reply', text: 'Hello there', usage: { input: 12, output: 3 } });
    const reply = await anthropic().messages.create(message);
    expect(reply).toMatchObject({
      model: 'claude-fake',
      role: 'assistant',
      content: [{ type: 'text', text: 'Hello there' }],
      stop_reason: 'end_turn',
      usage: { input_tokens: 12, output_tokens: 3 },
    });
  });

  it('streamed text through messages.stream(): text events and finalText()', async () => {
    fake.enqueue({ kind: 'reply', chunks: ['Hel', 'lo, ', 'world'] });
    const stream = anthropic().messages.stream(message);
    const deltas: string[] = [];
    stream.on('text', (delta) => deltas.push(delta));
    expect(await stream.finalText()).toBe('Hello, world');
    expect(deltas).toEqual(['Hel', 'lo, ', 'world']);
  });

  const weatherArguments = { city: 'Paris', days: 3, units: { temperature: 'celsius' } };
  const searchArguments = { query: 'caf\u00e9 "open now"', limit: 5 };
  const toolReply = {
    kind: 'reply' as const,
    text: 'Let me check.',
    toolCalls: [
      { id: 'toolu_weather', name: 'get_weather', arguments: weatherArguments },
      { name: 'search', arguments: JSON.stringify(searchArguments) },
    ],
  };

  it('streamed parallel tool calls: finalMessage() holds the parsed inputs', async () => {
    fake.enqueue(toolReply);
    const final = await anthropic().messages.stream(message).finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content).toMatchObject([
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_weather', name: 'get_weather', input: weatherArguments },
      {
        type: 'tool_use',
        id: expect.stringMatching(/^toolu_/),
        name: 'search',
        input: searchArguments,
      },
    ]);
  });

  it('streamed parallel tool calls: raw input_json_delta pieces assemble per block', async () => {
    fake.enqueue(toolReply);
    const stream = await anthropic().messages.create({ ...message, stream: true });
    const blocks = new Map<number, { type: string; name?: string; json: string; deltas: number }>();
    const types: string[] = [];
    let stopReason: string | null | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_start') {
        const block = event.content_block;
        blocks.set(event.index, {
          type: block.type,
          name: block.type === 'tool_use' ? block.name : undefined,
          json: '',
          deltas: 0,
        });
      }
      if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta') {
        const block = blocks.get(event.index);
        if (!block) throw new Error(`delta for unopened block ${event.index}`);
        block.json += event.delta.partial_json;
        block.deltas += 1;
      }
      if (event.type === 'message_delta') stopReason = event.delta.stop_reason;
    }
    expect(types[0]).toBe('message_start');
    expect(types.slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(stopReason).toBe('tool_use');
    expect([...blocks.values()].map((block) => block.type)).toEqual([
      'text',
      'tool_use',
      'tool_use',
    ]);
    expect(blocks.get(1)?.name).toBe('get_weather');
    expect(JSON.parse(blocks.get(1)?.json ?? '')).toEqual(weatherArguments);
    expect(blocks.get(2)?.name).toBe('search');
    expect(JSON.parse(blocks.get(2)?.json ?? '')).toEqual(searchArguments);
    expect(blocks.get(1)?.deltas).toBeGreaterThan(1);
    expect(blocks.get(2)?.deltas).toBeGreaterThan(1);
  });

  it('usage: input and cache tokens in message_start, output tokens in message_delta', async () => {
    const usage = { input: 30, output: 42, cacheRead: 1000, cacheWrite: 200 };
    fake.enqueue({ kind: 'reply', text: 'ok', usage }, { kind: 'reply', text: 'ok', usage });
    const final = await anthropic().messages.stream(message).finalMessage();
    expect(final.usage).toMatchObject({
      input_tokens: 30,
      output_tokens: 42,
      cache_read_input_tokens: 1000,
      cache_creation_input_tokens: 200,
    });

    const events = await collect(await anthropic().messages.create({ ...message, stream: true }));
    const start = events.find((event) => event.type === 'message_start');
    const delta = events.find((event) => event.type === 'message_delta');
    expect(start?.message.usage).toMatchObject({
      input_tokens: 30,
      cache_read_input_tokens: 1000,
      cache_creation_input_tokens: 200,
    });
    expect(delta?.usage.output_tokens).toBe(42);
  });

  it.each([
    {
      status: 429,
      headers: { 'retry-after': '2', 'retry-after-ms': '1500' },
      errorClass: Anthropic.RateLimitError,
      errorType: 'rate_limit_error',
    },
    { status: 500, errorClass: Anthropic.InternalServerError, errorType: 'api_error' },
    { status: 503, errorClass: Anthropic.ServiceUnavailableError, errorType: 'overloaded_error' },
    { status: 529, errorClass: Anthropic.OverloadedError, errorType: 'overloaded_error' },
    {
      status: 400,
      type: 'context_length' as const,
      errorClass: Anthropic.BadRequestError,
      errorType: 'invalid_request_error',
      message: 'prompt is too long: 210000 tokens > 200000 maximum',
    },
    { status: 401, errorClass: Anthropic.AuthenticationError, errorType: 'authentication_error' },
  ])('HTTP $status surfaces as $errorClass.name with its type and headers', async (row) => {
    fake.enqueue({ kind: 'error', status: row.status, type: row.type, headers: row.headers });
    const error = await rejectionOf(anthropic().messages.create(message));
    expect(error).toBeInstanceOf(row.errorClass);
    const apiError = error as InstanceType<typeof Anthropic.APIError>;
    expect(apiError.status).toBe(row.status);
    expect(apiError.type).toBe(row.errorType);
    expect(apiError.requestID).toMatch(/^req_/);
    if (row.message) expect(apiError.message).toContain(row.message);
    for (const [name, value] of Object.entries(row.headers ?? {})) {
      expect(apiError.headers?.get(name)).toBe(value);
    }
  });

  it('an error event inside a 200 stream makes the SDK stream throw after the text', async () => {
    fake.enqueue({ kind: 'stream-error', afterChunks: ['Half ', 'an '] });
    const received: string[] = [];
    const error = await rejectionOf(
      (async () => {
        for await (const text of streamedText('anthropic')) received.push(text);
      })(),
    );
    expect(received).toEqual(['Half ', 'an ']);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');

    fake.enqueue({ kind: 'stream-error', type: 'server' });
    const streamError = await rejectionOf(anthropic().messages.stream(message).finalMessage());
    expect((streamError as InstanceType<typeof Anthropic.APIError>).type).toBe('api_error');
  });

  it('stream-error on a non-streamed request is the matching HTTP error', async () => {
    fake.enqueue({ kind: 'stream-error' });
    const error = await rejectionOf(anthropic().messages.create(message));
    expect(error).toBeInstanceOf(Anthropic.OverloadedError);
  });

  it('cut: raw events end without message_stop, and finalMessage() rejects', async () => {
    fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const events = await collect(await anthropic().messages.create({ ...message, stream: true }));
    expect(events.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
    ]);

    fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const error = await rejectionOf(anthropic().messages.stream(message).finalMessage());
    expect(error).toBeInstanceOf(Anthropic.AnthropicError);
    expect((error as Error).message).toContain('stream ended without producing a Message');
  });

  it('records each request: api, path, headers and the parsed body', async () => {
    fake.enqueue({ kind: 'reply', text: 'ok' });
    const arrived = fake.nextRequest();
    await anthropic().messages.create(message);
    const recorded = await arrived;
    expect(fake.requests).toEqual([recorded]);
    expect(recorded).toMatchObject({
      api: 'anthropic',
      path: '/v1/messages',
      body: { model: 'claude-fake', max_tokens: 1024, messages: [{ role: 'user', content: 'Hi' }] },
    });
    // SDK 1.14 sends the key as `authorization: Bearer`, older ones as `x-api-key`.
    const headerValues = Object.values(recorded.headers).map(String);
    expect(headerValues.some((value) => value.includes('test-key'))).toBe(true);
    expect(recorded.headers['anthropic-version']).toBeDefined();
  });
});

describe('options for benchmarks', () => {
  it('respond answers each request from its body when nothing is enqueued; onAnswered times it; recordRequests: false keeps none', async () => {
    const spans: { content: unknown; ms: number }[] = [];
    const scripted = await startFakeProviderServer({
      respond: (request) => ({ kind: 'reply', text: `echo ${request.body.messages[0].content}` }),
      onAnswered: (request, span) =>
        spans.push({
          content: request.body.messages[0].content,
          ms: span.endedAt - span.arrivedAt,
        }),
      recordRequests: false,
    });
    try {
      const client = new OpenAI({
        apiKey: 'sk-test',
        baseURL: scripted.openaiBaseUrl,
        maxRetries: 0,
      });
      const ask = async (content: string) => {
        const completion = await client.chat.completions.create({
          ...chat,
          messages: [{ role: 'user', content }],
        });
        return completion.choices[0]?.message.content;
      };
      // Enqueued responses still come first.
      scripted.enqueue({ kind: 'reply', text: 'queued' });
      expect(await ask('one')).toBe('queued');
      expect(await Promise.all([ask('two'), ask('three')])).toEqual(['echo two', 'echo three']);
      expect(scripted.requests).toEqual([]);
      expect(spans.map((span) => span.content).sort()).toEqual(['one', 'three', 'two']);
      for (const span of spans) expect(span.ms).toBeGreaterThanOrEqual(0);
    } finally {
      await scripted.close();
    }
  });
});
