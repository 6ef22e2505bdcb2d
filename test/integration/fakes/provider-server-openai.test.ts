import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import { chat, collect, rejectionOf, useFakeProvider } from './provider-server-support.js';

/**
 * The fake provider is only worth something if the real SDKs parse what it
 * sends exactly as they parse the vendors. Every test here goes through the
 * real `openai` and `@anthropic-ai/sdk` clients (no retries) over a socket.
 * This file: OpenAI Chat Completions.
 */

const provider = useFakeProvider();
const { openai, streamedText } = provider;

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
    provider.fake.enqueue({ kind: 'reply', text: 'Hello there', usage: { input: 12, output: 3 } });
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
    provider.fake.enqueue({
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
    provider.fake.enqueue({ kind: 'reply', chunks: ['Hel', 'lo, ', 'world'], finish: 'length' });
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    const chunks = await collect(stream);
    const deltas = chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || []);
    expect(deltas).toEqual(['Hel', 'lo, ', 'world']);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('length');
  });

  it('streamed parallel tool calls assemble by index into the scripted arguments', async () => {
    const weatherArguments = { city: 'Paris', days: 3, units: { temperature: 'celsius' } };
    const searchArguments = '{"query":"caf\u00e9 \\"open now\\"","limit":5}';
    provider.fake.enqueue({
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
    provider.fake.enqueue({
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
    provider.fake.enqueue(
      { kind: 'reply', text: 'ok', usage },
      { kind: 'reply', text: 'ok', usage },
    );
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
    provider.fake.enqueue({
      kind: 'error',
      status: row.status,
      type: row.type,
      headers: row.headers,
    });
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
    provider.fake.enqueue({ kind: 'stream-error', afterChunks: ['Half ', 'an '], type: 'server' });
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
    provider.fake.enqueue({ kind: 'cut', afterChunks: ['Half ', 'an '] });
    const chunks = await collect(await openai().chat.completions.create({ ...chat, stream: true }));
    expect(chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || [])).toEqual([
      'Half ',
      'an ',
    ]);
    expect(chunks.some((chunk) => chunk.choices[0]?.finish_reason)).toBe(false);
  });

  it('records each request: api, path, headers and the parsed body', async () => {
    provider.fake.enqueue({ kind: 'reply', text: 'ok' });
    const arrived = provider.fake.nextRequest();
    await collect(await openai().chat.completions.create({ ...chat, stream: true }));
    const recorded = await arrived;
    expect(provider.fake.requests).toEqual([recorded]);
    expect(recorded).toMatchObject({
      api: 'openai',
      path: '/v1/chat/completions',
      body: { model: 'gpt-fake', stream: true, messages: [{ role: 'user', content: 'Hi' }] },
    });
    expect(recorded.headers.authorization).toBe('Bearer sk-test');
    expect(recorded.receivedAt).toBeLessThanOrEqual(Date.now());
  });
});
