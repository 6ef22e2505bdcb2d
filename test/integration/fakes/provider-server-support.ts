import { once } from 'node:events';
import net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, beforeEach, vi } from 'vitest';
import { type FakeProviderServer, startFakeProviderServer } from '../../fakes/provider-server.js';

/**
 * What the fake provider's own tests share (provider-server*.test.ts): a
 * fresh fake per test, the real SDK clients pointed at it (no retries),
 * and small helpers to read what they stream.
 */

export type Vendor = 'openai' | 'anthropic';

export const chat = { model: 'gpt-fake', messages: [{ role: 'user' as const, content: 'Hi' }] };
export const message = {
  model: 'claude-fake',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'Hi' }],
};

/** A fake started before each test of the file and closed after it, with clients on it. */
export function useFakeProvider() {
  let current: FakeProviderServer | undefined;
  beforeEach(async () => {
    current = await startFakeProviderServer();
  });
  afterEach(async () => current?.close());
  const fake = (): FakeProviderServer => {
    if (!current) throw new Error('the fake provider runs only during a test');
    return current;
  };
  const openai = (maxRetries = 0): OpenAI =>
    new OpenAI({ apiKey: 'sk-test', baseURL: fake().openaiBaseUrl, maxRetries });
  const anthropic = (maxRetries = 0): Anthropic =>
    new Anthropic({ apiKey: 'test-key', baseURL: fake().anthropicBaseUrl, maxRetries });

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

  return {
    get fake(): FakeProviderServer {
      return fake();
    },
    openai,
    anthropic,
    streamedText,
    streamedRequestWrites: (vendor: Vendor) => streamedRequestWrites(fake(), vendor),
  };
}

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const collected: T[] = [];
  for await (const item of items) collected.push(item);
  return collected;
}

export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

/** Rejects after `ms` instead of hanging the test until its timeout. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
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
async function streamedRequestWrites(
  fake: FakeProviderServer,
  vendor: Vendor,
): Promise<{ text: string; writes: number }> {
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
