import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it, vi } from 'vitest';
import { NO_RESPONSE_ENQUEUED, startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeReply } from '../../fakes/provider-types.js';
import {
  chat,
  collect,
  message,
  rejectionOf,
  useFakeProvider,
  within,
} from './provider-server-support.js';

/**
 * The fake provider is only worth something if the real SDKs parse what it
 * sends exactly as they parse the vendors. Every test here goes through the
 * real `openai` and `@anthropic-ai/sdk` clients (no retries) over a socket.
 * This file: what both APIs share, and the options for benchmarks;
 * provider-server-openai.test.ts and provider-server-anthropic.test.ts
 * hold each API's own.
 */

const provider = useFakeProvider();
const { openai, anthropic, streamedText, streamedRequestWrites } = provider;
const SDKS = { openai: OpenAI, anthropic: Anthropic };

describe.each(['openai', 'anthropic'] as const)('both APIs (%s)', (vendor) => {
  it('text without chunks streams as word-sized deltas', async () => {
    provider.fake.enqueue({ kind: 'reply', text: 'The quick brown fox' });
    expect(await collect(streamedText(vendor))).toEqual(['The ', 'quick ', 'brown ', 'fox']);
  });

  it('betweenChunks: the consumer sees chunk 0 before chunk 1 is sent', async () => {
    const log: string[] = [];
    let sawChunk0!: () => void;
    const chunk0Seen = new Promise<void>((resolve) => {
      sawChunk0 = resolve;
    });
    provider.fake.enqueue({
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
    provider.fake.enqueue(reply);
    expect(await collect(streamedText(vendor))).toEqual(['one ', 'two']);
    provider.fake.enqueue(reply);
    const burst = await streamedRequestWrites(vendor);
    expect(burst.text).toMatch(/^HTTP\/1\.1 200/);
    expect(burst.text).toContain(vendor === 'openai' ? 'data: [DONE]' : 'event: message_stop');
    expect(burst.writes).toBe(1);
    // The default, frame by frame, for comparison: headers, then each frame.
    provider.fake.enqueue({ ...reply, delivery: 'frames' });
    expect((await streamedRequestWrites(vendor)).writes).toBeGreaterThan(3);
  });

  it('a burst reply cannot be paced', () => {
    expect(() =>
      provider.fake.enqueue({
        kind: 'reply',
        chunks: ['a', 'b'],
        delivery: 'burst',
        chunkDelayMs: 5,
      }),
    ).toThrow('cannot be paced');
    expect(provider.fake.pendingResponses()).toBe(0);
  });

  it('firstByteDelayMs and chunkDelayMs pace the answer', async () => {
    provider.fake.enqueue({
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
    provider.fake.enqueue({ kind: 'reply', text: 'ok' }, { kind: 'reset' });
    await collect(streamedText(vendor));
    const error = await rejectionOf(collect(streamedText(vendor)));
    expect(error).toBeInstanceOf(SDKS[vendor].APIConnectionError);
    expect(provider.fake.requests).toHaveLength(2);
    expect(provider.fake.abortedRequests()).toBe(0);
  });

  it('stall: nothing after the partial text until the client aborts, which the fake counts', async () => {
    provider.fake.enqueue({ kind: 'stall', afterChunks: ['partial '] });
    const controller = new AbortController();
    const received: string[] = [];
    // Both SDKs end the iteration quietly, without throwing, when the caller aborts.
    for await (const text of streamedText(vendor, controller.signal)) {
      received.push(text);
      setTimeout(() => controller.abort(), 20);
    }
    expect(received).toEqual(['partial ']);
    expect(controller.signal.aborted).toBe(true);
    await vi.waitFor(() => expect(provider.fake.abortedRequests()).toBe(1));
  });

  it('close() ends a stalled response; the SDK stream fails with "terminated"', async () => {
    provider.fake.enqueue({ kind: 'stall', afterChunks: ['partial '] });
    const arrived = provider.fake.nextRequest();
    const received: string[] = [];
    const consumed = rejectionOf(
      (async () => {
        for await (const text of streamedText(vendor)) received.push(text);
      })(),
    );
    await arrived;
    await vi.waitFor(() => expect(received).toEqual(['partial ']));
    await within(provider.fake.close(), 2_000, 'closing with a stalled response');
    // Mid-stream disconnects reach the caller as undici's bare TypeError, not an SDK error class.
    const error = await within(consumed, 2_000, 'the client noticing the close');
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe('terminated');
    expect(provider.fake.abortedRequests()).toBe(0);
  });

  it('an empty queue answers 500 "no response enqueued", and the SDK does not retry it', async () => {
    const call =
      vendor === 'openai'
        ? openai(2).chat.completions.create(chat)
        : anthropic(2).messages.create(message);
    const error = await rejectionOf(call);
    expect(error).toBeInstanceOf(SDKS[vendor].InternalServerError);
    expect((error as Error).message).toContain(NO_RESPONSE_ENQUEUED);
    expect(provider.fake.requests).toHaveLength(1);
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
