import { describe, expect, it } from 'vitest';
import type { Message, ModelRequest } from '../../../src/llm/types.js';
import {
  condensedLine,
  condenseToolResults,
  estimateShare,
} from '../../../src/orchestrator/tool-loop/context-window.js';
import { wrapUntrustedOutput } from '../../../src/tools/untrusted-output.js';

/** Anthropic-kind estimates: 3.5 characters a token, so sizes are easy to reason about. */
const limits = { contextWindow: 1000, kind: 'anthropic' as const };
const build = (messages: Message[]): ModelRequest => ({ messages });

function exchange(id: string, size: number): Message[] {
  return [
    { role: 'assistant', content: '', toolCalls: [{ id, name: 'fetch', arguments: {} }] },
    {
      role: 'tool',
      toolCallId: id,
      toolName: 'fetch',
      content: wrapUntrustedOutput({ toolName: 'fetch', content: 'x'.repeat(size) }, 100_000),
    },
  ];
}

describe('condensing tool results', () => {
  const messages: Message[] = [
    { role: 'user', content: 'question' },
    ...exchange('a', 1000),
    ...exchange('b', 1000),
    ...exchange('c', 1000),
  ];

  it('condenses the oldest results first until under the share, keeping the latest turn whole', () => {
    expect(estimateShare(build(messages), limits)).toBeGreaterThan(0.8);
    const result = condenseToolResults({
      messages,
      buildRequest: build,
      limits,
      share: 0.7,
      keepLatest: true,
    });
    expect(result.condensed).toBe(2);
    expect(estimateShare(build(result.messages), limits)).toBeLessThan(0.7);
    const tools = result.messages.filter((message) => message.role === 'tool');
    expect(tools.map((message) => message.content.startsWith('[condensed'))).toEqual([
      true,
      true,
      false,
    ]);
    // Every call keeps its result, and the input is left alone.
    expect(result.messages).toHaveLength(messages.length);
    expect(messages[2]?.content).toMatch(/^<tool_output/);
  });

  it('after an overflow the latest results are condensed too', () => {
    const result = condenseToolResults({
      messages,
      buildRequest: build,
      limits,
      share: 0.1,
      keepLatest: false,
    });
    expect(result.condensed).toBe(3);
  });

  it('a condensed line names the tool, its outcome and the start of its data', () => {
    const line = condensedLine('fetch', {
      content: wrapUntrustedOutput(
        { toolName: 'fetch', content: 'HTTP 404\nnot found', isError: true },
        1000,
      ),
      isError: true,
    });
    expect(line).toBe('[condensed earlier result] fetch failed 18 characters: HTTP 404 not found');
  });
});
