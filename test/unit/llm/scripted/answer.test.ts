import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { LlmError } from '../../../../src/llm/errors.js';
import { estimateRequestTokens, estimateTextTokens } from '../../../../src/llm/estimate-tokens.js';
import { scriptedModel } from '../../../../src/llm/scripted/index.js';
import type { Message, ModelRequest, StreamPart } from '../../../../src/llm/types.js';
import { REPEAT_WARNING } from '../../../../src/orchestrator/tool-loop/repeat-guard.js';
import { wrapUntrustedOutput } from '../../../../src/tools/untrusted-output.js';
import { collect, finishOf, textOf } from './collect.js';

const question: ModelRequest = {
  system: { stable: 'You are a helpful assistant.' },
  messages: [{ role: 'user', content: 'Which river flows through the city of Vienna?' }],
};

const deltas = (parts: StreamPart[]) =>
  parts.flatMap((part) => (part.type === 'text-delta' ? [part.text] : []));

interface AnsweredCall {
  name: string;
  arguments: Record<string, unknown>;
  content: string;
  isError?: boolean;
}

/** The question, one assistant turn calling `calls`' tools, and their results in that order. */
function afterToolCalls(question: string, calls: AnsweredCall[]): Message[] {
  const id = (index: number) => `call_${index + 1}`;
  return [
    { role: 'user', content: question },
    {
      role: 'assistant',
      content: '',
      toolCalls: calls.map((call, index) => ({
        id: id(index),
        name: call.name,
        arguments: call.arguments,
      })),
    },
    ...calls.map(
      (call, index): Message => ({
        role: 'tool',
        toolCallId: id(index),
        toolName: call.name,
        content: call.content,
        ...(call.isError ? { isError: true } : {}),
      }),
    ),
  ];
}

describe('scripted model: answers', () => {
  it('answers a question without tools with a text marked as scripted', async () => {
    const parts = await collect(question);
    const text = textOf(parts);
    expect(text.startsWith('[scripted model] ')).toBe(true);
    expect(text).toContain('Which river flows through the city of Vienna?');
    expect(parts.map((part) => part.type).slice(-2)).toEqual(['usage', 'finish']);
    expect(finishOf(parts)).toBe('stop');
  });

  it('streams word by word: each delta is a word and its following space', async () => {
    const parts = await collect(question);
    const tokens = deltas(parts);
    expect(tokens.length).toBeGreaterThan(5);
    expect(tokens.join('')).toBe(textOf(parts));
    for (const token of tokens) expect(token).toMatch(/^\S+\s*$/);
  });

  it('estimates usage with the shared token estimator', async () => {
    const parts = await collect(question);
    const usage = parts.find((part) => part.type === 'usage');
    expect(usage).toEqual({
      type: 'usage',
      usage: {
        inputTokens: estimateRequestTokens(question, 'scripted'),
        outputTokens: estimateTextTokens(textOf(parts), 'scripted'),
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
      },
    });
  });

  it('summarises the tool results that answer its tool calls', async () => {
    const parts = await collect({
      tools: [{ name: 'calculator', description: 'math', parameters: z.object({}) }],
      messages: afterToolCalls('What is 6 * 7, and what time is it?', [
        { name: 'calculator', arguments: { expression: '6 * 7' }, content: '42' },
        { name: 'current_time', arguments: {}, content: 'clock unavailable', isError: true },
      ]),
    });
    expect(textOf(parts)).toBe(
      '[scripted model] Using calculator: 42\nUsing current_time failed: clock unavailable',
    );
    expect(finishOf(parts)).toBe('stop');
  });

  it('reads what each tool returned out of the untrusted-output block the loop puts it in', async () => {
    const wrapped = (toolName: string, content: string, isError = false) =>
      wrapUntrustedOutput({ toolName, content, isError }, 10_000);
    const parts = await collect({
      messages: afterToolCalls('What is 6 * 7, and the time?', [
        {
          name: 'calculator',
          arguments: { expression: '6 * 7' },
          content: wrapped('calculator', '42'),
        },
        {
          name: 'current_time',
          arguments: {},
          content: `${wrapped('current_time', 'clock unavailable', true)}\n${REPEAT_WARNING}`,
          isError: true,
        },
        {
          name: 'http_fetch',
          arguments: { url: 'https://example.com' },
          content: wrapped('http_fetch', ''),
        },
      ]),
    });
    expect(textOf(parts)).toBe(
      '[scripted model] Using calculator: 42\nUsing current_time failed: clock unavailable\n' +
        'Using http_fetch: (empty result)',
    );
  });

  it('is deterministic: the same request streams the same parts', async () => {
    const request: ModelRequest = {
      ...question,
      tools: [{ name: 'calculator', description: 'math', parameters: z.object({}) }],
    };
    expect(await collect(request)).toEqual(await collect(request));
    expect(await collect(question)).toEqual(await collect(question));
  });

  it('truncates at maxOutputTokens and finishes with length', async () => {
    const parts = await collect({ ...question, maxOutputTokens: 5 });
    const text = textOf(parts);
    expect(text).toBe('[scripted model]');
    expect(finishOf(parts)).toBe('length');
    const usage = parts.find((part) => part.type === 'usage');
    expect(usage?.type === 'usage' && usage.usage.outputTokens).toBeLessThanOrEqual(5);
  });

  it('does not truncate when the answer fits', async () => {
    const parts = await collect({ ...question, maxOutputTokens: 1_000 });
    expect(finishOf(parts)).toBe('stop');
  });

  it('names the provider scripted and takes a model id', () => {
    const model = scriptedModel({ modelId: 'offline-demo' });
    expect([model.provider, model.modelId]).toEqual(['scripted', 'offline-demo']);
    expect(() => scriptedModel({ tokenDelayMs: -1 })).toThrow(RangeError);
  });
});

describe('scripted model: cancellation', () => {
  it('throws a cancelled LlmError when aborted during a token delay', async () => {
    const model = scriptedModel({ tokenDelayMs: 20 });
    const controller = new AbortController();
    const received: StreamPart[] = [];
    const run = async () => {
      for await (const part of model.stream(question, { signal: controller.signal })) {
        received.push(part);
        if (received.length === 2) setTimeout(() => controller.abort(), 5);
      }
    };
    const error = await run().then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(LlmError);
    expect(error).toMatchObject({ kind: 'cancelled', provider: 'scripted' });
    expect(received.map((part) => part.type)).toEqual(['text-delta', 'text-delta']);
  });

  it('rethrows the abort reason when it is an LlmError', async () => {
    const model = scriptedModel({ tokenDelayMs: 20 });
    const controller = new AbortController();
    const timeout = new LlmError({ kind: 'timeout', provider: 'scripted', model: 'scripted' });
    const iterator = model.stream(question, { signal: controller.signal })[Symbol.asyncIterator]();
    await iterator.next();
    const pending = iterator.next();
    controller.abort(timeout);
    await expect(pending).rejects.toBe(timeout);
  });

  it('throws before streaming when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    await expect(collect(question, { signal: controller.signal })).rejects.toMatchObject({
      kind: 'cancelled',
    });
  });
});
