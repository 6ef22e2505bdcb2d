import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { convertRequest } from '../../../../src/llm/openai/convert-messages.js';
import type { ToolDefinition } from '../../../../src/llm/types.js';

const target = { modelId: 'gpt-test', maxOutputTokens: 1000 };

const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'Current weather of a city',
  parameters: z.object({ city: z.string(), unit: z.enum(['c', 'f']).optional() }),
};

describe('convertRequest', () => {
  it('puts the system prompt first as one system message, stable part before volatile', () => {
    const params = convertRequest(
      {
        system: { stable: 'You are Waymark.', volatile: 'Budget left: 3 calls.' },
        messages: [{ role: 'user', content: 'hi' }],
      },
      target,
    );
    expect(params.messages).toEqual([
      { role: 'system', content: 'You are Waymark.\n\nBudget left: 3 calls.' },
      { role: 'user', content: 'hi' },
    ]);
  });

  it('sends the stable part alone when there is no volatile part, and no system message without one', () => {
    const withStable = convertRequest(
      { system: { stable: 'S' }, messages: [{ role: 'user', content: 'hi' }] },
      target,
    );
    expect(withStable.messages[0]).toEqual({ role: 'system', content: 'S' });
    const without = convertRequest({ messages: [{ role: 'user', content: 'hi' }] }, target);
    expect(without.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('turns assistant tool calls into tool_calls with JSON arguments and results into tool messages', () => {
    const params = convertRequest(
      {
        messages: [
          { role: 'user', content: 'weather in Oslo and Rome?' },
          {
            role: 'assistant',
            content: '',
            toolCalls: [
              { id: 'call_1', name: 'get_weather', arguments: { city: 'Oslo' } },
              { id: 'call_2', name: 'get_weather', arguments: { city: 'Rome', unit: 'c' } },
            ],
          },
          { role: 'tool', toolCallId: 'call_1', toolName: 'get_weather', content: '3 °C' },
          {
            role: 'tool',
            toolCallId: 'call_2',
            toolName: 'get_weather',
            content: 'service down',
            isError: true,
          },
          { role: 'assistant', content: 'Oslo is cold.', toolCalls: [] },
        ],
      },
      target,
    );
    expect(params.messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_1',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
          },
          {
            id: 'call_2',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Rome","unit":"c"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '3 °C' },
      { role: 'tool', tool_call_id: 'call_2', content: 'Error: service down' },
      { role: 'assistant', content: 'Oslo is cold.' },
    ]);
  });

  it('keeps assistant text that came with tool calls', () => {
    const params = convertRequest(
      {
        messages: [
          {
            role: 'assistant',
            content: 'Let me check.',
            toolCalls: [{ id: 'c', name: 'get_weather', arguments: { city: 'Oslo' } }],
          },
        ],
      },
      target,
    );
    expect(params.messages[0]).toMatchObject({ role: 'assistant', content: 'Let me check.' });
  });

  it('offers tools as functions with a JSON Schema and defaults tool_choice to auto', () => {
    const params = convertRequest(
      { messages: [{ role: 'user', content: 'hi' }], tools: [weather] },
      target,
    );
    expect(params.tool_choice).toBe('auto');
    expect(params.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather of a city',
          parameters: {
            type: 'object',
            properties: {
              city: { type: 'string' },
              unit: { type: 'string', enum: ['c', 'f'] },
            },
            required: ['city'],
          },
        },
      },
    ]);
  });

  it('passes an explicit tool choice, and sends neither tools nor tool_choice without tools', () => {
    const required = convertRequest(
      { messages: [], tools: [weather], toolChoice: 'required' },
      target,
    );
    expect(required.tool_choice).toBe('required');
    const none = convertRequest({ messages: [], tools: [], toolChoice: 'none' }, target);
    expect(none).not.toHaveProperty('tools');
    expect(none).not.toHaveProperty('tool_choice');
  });

  it('names the model, caps the output tokens at the model maximum and passes temperature', () => {
    expect(convertRequest({ messages: [] }, target)).toEqual({
      model: 'gpt-test',
      messages: [],
      max_completion_tokens: 1000,
    });
    const small = convertRequest({ messages: [], maxOutputTokens: 200, temperature: 0 }, target);
    expect(small.max_completion_tokens).toBe(200);
    expect(small.temperature).toBe(0);
    const big = convertRequest({ messages: [], maxOutputTokens: 5000 }, target);
    expect(big.max_completion_tokens).toBe(1000);
  });
});
