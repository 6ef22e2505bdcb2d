import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { collect, message, rejectionOf, useFakeProvider } from './provider-server-support.js';

/**
 * The fake provider is only worth something if the real SDKs parse what it
 * sends exactly as they parse the vendors. Every test here goes through the
 * real `openai` and `@anthropic-ai/sdk` clients (no retries) over a socket.
 * This file: Anthropic Messages.
 */

const provider = useFakeProvider();
const { anthropic, streamedText } = provider;

describe('Anthropic Messages', () => {
  it('non-streamed text: content, stop reason and usage', async () => {
    provider.fake.enqueue({ kind: 'reply', text: 'Hello there', usage: { input: 12, output: 3 } });
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
    provider.fake.enqueue({ kind: 'reply', chunks: ['Hel', 'lo, ', 'world'] });
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
    provider.fake.enqueue(toolReply);
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
    provider.fake.enqueue(toolReply);
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
    provider.fake.enqueue(
      { kind: 'reply', text: 'ok', usage },
      { kind: 'reply', text: 'ok', usage },
    );
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
    provider.fake.enqueue({
      kind: 'error',
      status: row.status,
      type: row.type,
      headers: row.headers,
    });
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
    provider.fake.enqueue({ kind: 'stream-error', afterChunks: ['Half ', 'an '] });
    const received: string[] = [];
    const error = await rejectionOf(
      (async () => {
        for await (const text of streamedText('anthropic')) received.push(text);
      })(),
    );
    expect(received).toEqual(['Half ', 'an ']);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');

    provider.fake.enqueue({ kind: 'stream-error', type: 'server' });
    const streamError = await rejectionOf(anthropic().messages.stream(message).finalMessage());
    expect((streamError as InstanceType<typeof Anthropic.APIError>).type).toBe('api_error');
  });

  it('stream-error on a non-streamed request is the matching HTTP error', async () => {
    provider.fake.enqueue({ kind: 'stream-error' });
    const error = await rejectionOf(anthropic().messages.create(message));
    expect(error).toBeInstanceOf(Anthropic.OverloadedError);
  });

  it('cut: raw events end without message_stop, and finalMessage() rejects', async () => {
    provider.fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const events = await collect(await anthropic().messages.create({ ...message, stream: true }));
    expect(events.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
    ]);

    provider.fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const error = await rejectionOf(anthropic().messages.stream(message).finalMessage());
    expect(error).toBeInstanceOf(Anthropic.AnthropicError);
    expect((error as Error).message).toContain('stream ended without producing a Message');
  });

  it('a stream cut short opens with message_start reporting the scripted input side', async () => {
    provider.fake.enqueue({
      kind: 'cut',
      usage: { input: 700, output: 0, cacheRead: 200, cacheWrite: 100 },
    });
    const events = await collect(await anthropic().messages.create({ ...message, stream: true }));
    const start = events[0] as Anthropic.RawMessageStartEvent;
    expect(start.type).toBe('message_start');
    expect(start.message.usage).toMatchObject({
      input_tokens: 700,
      cache_read_input_tokens: 200,
      cache_creation_input_tokens: 100,
      output_tokens: 0,
    });
  });

  it('records each request: api, path, headers and the parsed body', async () => {
    provider.fake.enqueue({ kind: 'reply', text: 'ok' });
    const arrived = provider.fake.nextRequest();
    await anthropic().messages.create(message);
    const recorded = await arrived;
    expect(provider.fake.requests).toEqual([recorded]);
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
