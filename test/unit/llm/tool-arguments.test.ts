import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { retryAfterMs } from '../../../src/llm/errors.js';
import { estimateRequestTokens, estimateTextTokens } from '../../../src/llm/estimate-tokens.js';
import { toolParametersJsonSchema, toToolCallPart } from '../../../src/llm/tool-arguments.js';
import type { ToolDefinition } from '../../../src/llm/types.js';

const calculator: ToolDefinition = {
  name: 'calculator',
  description: 'Evaluates arithmetic',
  parameters: z.object({ expression: z.string().min(1) }),
};

describe('tool arguments', () => {
  it('turns zod parameters into a plain JSON Schema object', () => {
    expect(toolParametersJsonSchema(calculator)).toEqual({
      type: 'object',
      properties: { expression: { type: 'string', minLength: 1 } },
      required: ['expression'],
    });
  });

  it('valid arguments become a tool-call part with parsed arguments and the count of the raw ones', () => {
    expect(
      toToolCallPart({ id: 'c1', name: 'calculator', rawArguments: '{"expression":"1+1"}' }, [
        calculator,
      ]),
    ).toEqual({
      type: 'tool-call',
      toolCall: { id: 'c1', name: 'calculator', arguments: { expression: '1+1' } },
      argumentChars: '{"expression":"1+1"}'.length,
    });
  });

  it('broken JSON, an unknown tool or a schema mismatch become tool-call-invalid with a reason', () => {
    const broken = toToolCallPart(
      { id: 'c1', name: 'calculator', rawArguments: '{"expression":' },
      [calculator],
    );
    expect(broken).toMatchObject({ type: 'tool-call-invalid', rawArguments: '{"expression":' });
    expect(
      toToolCallPart({ id: 'c2', name: 'rm', rawArguments: '{}' }, [calculator]),
    ).toMatchObject({
      type: 'tool-call-invalid',
      reason: 'there is no tool named "rm"',
    });
    const mismatch = toToolCallPart(
      { id: 'c3', name: 'calculator', rawArguments: '{"expression":""}' },
      [calculator],
    );
    expect(mismatch).toMatchObject({ type: 'tool-call-invalid' });
    expect(mismatch.type === 'tool-call-invalid' && mismatch.reason).toContain('expression');
  });
});

describe('token estimates', () => {
  it('count OpenAI text exactly and others by characters', () => {
    expect(estimateTextTokens('hello world', 'openai')).toBe(2);
    expect(estimateTextTokens('a'.repeat(35), 'anthropic')).toBe(10);
    expect(estimateTextTokens('', 'openai')).toBe(0);
  });

  it('include the system prompt, messages and tool schemas', () => {
    const bare = estimateRequestTokens(
      { messages: [{ role: 'user', content: 'What is 2+2?' }] },
      'openai',
    );
    const full = estimateRequestTokens(
      {
        system: { stable: 'You are helpful.' },
        messages: [{ role: 'user', content: 'What is 2+2?' }],
        tools: [calculator],
      },
      'openai',
    );
    expect(full).toBeGreaterThan(bare + 10);
  });
});

describe('retryAfterMs', () => {
  it('reads retry-after-ms, retry-after seconds and an HTTP date', () => {
    expect(retryAfterMs({ 'retry-after-ms': '1500' })).toBe(1500);
    expect(retryAfterMs({ 'retry-after': '2' })).toBe(2000);
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs({ 'retry-after': 'Thu, 01 Jan 2026 00:00:05 GMT' }, now)).toBe(5000);
    expect(retryAfterMs(new Headers({ 'retry-after': '1' }))).toBe(1000);
    expect(retryAfterMs({})).toBeUndefined();
    expect(retryAfterMs({ 'retry-after': 'soon' })).toBeUndefined();
  });
});
