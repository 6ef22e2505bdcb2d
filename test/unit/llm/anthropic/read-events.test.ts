import type Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createEventReader } from '../../../../src/llm/anthropic/read-events.js';
import { LlmError } from '../../../../src/llm/errors.js';
import { ArgumentBudget } from '../../../../src/llm/output-bound.js';
import type { ToolDefinition } from '../../../../src/llm/types.js';

const tools: ToolDefinition[] = [
  { name: 'lookup', description: 'Looks a key up', parameters: z.object({ key: z.string() }) },
];
const context = { provider: 'anthropic', model: 'claude-test' };
/** 16 x 64 = 1,024 characters of tool input. */
const budget = () => new ArgumentBudget({ ...context, maxOutputTokens: 16 });

/** Events as they come off the wire: JSON, whatever the SDK's types say. */
function events(...list: object[]): Anthropic.RawMessageStreamEvent[] {
  return list as Anthropic.RawMessageStreamEvent[];
}

const start = {
  type: 'message_start',
  message: { usage: { input_tokens: 10, output_tokens: 0 } },
};
const finish = [
  { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 5 } },
  { type: 'message_stop' },
];
const toolUse = [
  {
    type: 'content_block_start',
    index: 0,
    content_block: { type: 'tool_use', id: 'tu_1', name: 'lookup' },
  },
  {
    type: 'content_block_delta',
    index: 0,
    delta: { type: 'input_json_delta', partial_json: '{"key":"a"}' },
  },
];

describe('createEventReader', () => {
  it('a tool_use block, once stopped, is a tool call', () => {
    const reader = createEventReader(tools, budget());
    const parts = events(
      start,
      ...toolUse,
      { type: 'content_block_stop', index: 0 },
      ...finish,
    ).map((event) => reader.read(event));
    expect(parts.filter(Boolean)).toEqual([
      {
        type: 'tool-call',
        toolCall: { id: 'tu_1', name: 'lookup', arguments: { key: 'a' } },
        argumentChars: '{"key":"a"}'.length,
      },
    ]);
    expect(reader.end(context).map((part) => part.type)).toEqual(['usage', 'finish']);
  });

  it('a tool_use block never stopped ends the turn as interrupted, not as an answer without the call', () => {
    const reader = createEventReader(tools, budget());
    for (const event of events(start, ...toolUse, ...finish)) reader.read(event);
    expect(() => reader.end(context)).toThrow(LlmError);
    expect(() => reader.end(context)).toThrow(
      expect.objectContaining({ code: 'llm_stream_interrupted' }),
    );
  });

  it('tool input past the output bound throws as it streams, before its block ends', () => {
    const reader = createEventReader(tools, budget());
    const inputDelta = (partial_json: string) =>
      events({
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json },
      })[0] as Anthropic.RawMessageStreamEvent;
    for (const event of events(start, toolUse[0] as object)) reader.read(event);
    reader.read(inputDelta(`{"key":"${'a'.repeat(1_000)}`));
    expect(() => reader.read(inputDelta('a'.repeat(100)))).toThrow(
      expect.objectContaining({
        kind: 'stream_interrupted',
        detail: 'the tool-call arguments passed 1024 characters, past its 16 tokens',
      }),
    );
  });

  it('a text delta whose text is not a string is no text', () => {
    const reader = createEventReader(tools, budget());
    const read = (text: unknown) =>
      reader.read(
        events({
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'text_delta', text },
        })[0] as Anthropic.RawMessageStreamEvent,
      );
    expect(read({ nested: true })).toBeUndefined();
    expect(read(42)).toBeUndefined();
    expect(read('Hello')).toEqual({ type: 'text-delta', text: 'Hello' });
  });
});
