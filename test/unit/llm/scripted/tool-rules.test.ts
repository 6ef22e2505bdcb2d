import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ModelRequest, StreamPart } from '../../../../src/llm/types.js';
import { askUserTool } from '../../../../src/tools/builtins/ask-user.js';
import { calculatorTool } from '../../../../src/tools/builtins/calculator.js';
import { createCurrentTimeTool } from '../../../../src/tools/builtins/current-time.js';
import { createHttpFetchTool } from '../../../../src/tools/builtins/http-fetch.js';
import { collect, finishOf, textOf, toolCalls, toolDefinition } from './collect.js';

// The built-ins' own parameters: the calls the rules make must be ones the real tools accept.
const calculator = toolDefinition('calculator', calculatorTool.parameters);
const currentTime = toolDefinition('current_time', createCurrentTimeTool().parameters);
const httpFetch = toolDefinition(
  'http_fetch',
  createHttpFetchTool({ allowedHosts: ['*'], allowPrivate: false, maxBytes: 1000, timeoutMs: 1000 })
    .parameters,
);
const askUser = toolDefinition('ask_user', askUserTool.parameters);
const allTools = [calculator, currentTime, httpFetch, askUser];

function ask(content: string, overrides: Partial<ModelRequest> = {}): Promise<StreamPart[]> {
  return collect({ messages: [{ role: 'user', content }], tools: allTools, ...overrides });
}

describe('scripted model: tool rules', () => {
  it('calls the calculator with the arithmetic expression in the question', async () => {
    const parts = await ask('What is 12 * (3 + 4)?');
    expect(toolCalls(parts)).toEqual([
      { id: 'call_1', name: 'calculator', arguments: { expression: '12 * (3 + 4)' } },
    ]);
    expect(finishOf(parts)).toBe('tool_calls');
    expect(textOf(parts)).toBe('');
  });

  it('reads dates and ranges as such, not as subtractions', async () => {
    const parts = await ask('Write 3-4 sentences about 2024-05-01 please', {
      tools: [calculator],
    });
    expect(toolCalls(parts)).toEqual([]);
    expect(finishOf(parts)).toBe('stop');
  });

  it('calls current_time with no arguments when the time is asked', async () => {
    const parts = await ask('What time is it in Paris right now?');
    expect(toolCalls(parts)).toEqual([{ id: 'call_1', name: 'current_time', arguments: {} }]);
  });

  it('calls http_fetch for each distinct URL, without trailing punctuation', async () => {
    const parts = await ask(
      'Summarise https://example.com/a and http://example.org/b?x=1, then https://example.com/a.',
    );
    expect(toolCalls(parts)).toEqual([
      {
        id: 'call_1',
        name: 'http_fetch',
        arguments: { url: 'https://example.com/a', method: 'GET' },
      },
      {
        id: 'call_2',
        name: 'http_fetch',
        arguments: { url: 'http://example.org/b?x=1', method: 'GET' },
      },
    ]);
  });

  it('asks the user when the request is too vague', async () => {
    const parts = await ask('help me');
    expect(toolCalls(parts)).toEqual([
      {
        id: 'call_1',
        name: 'ask_user',
        arguments: {
          question: 'Could you tell me more about what you need?',
          question_type: 'free_text',
        },
      },
    ]);
  });

  it('fires several rules in one turn, in a fixed order, with sequential ids', async () => {
    const parts = await ask(
      'What is the date today, what is 2+2, and what does https://a.example say?',
    );
    expect(toolCalls(parts).map((call) => [call.id, call.name])).toEqual([
      ['call_1', 'calculator'],
      ['call_2', 'current_time'],
      ['call_3', 'http_fetch'],
    ]);
    expect(finishOf(parts)).toBe('tool_calls');
  });

  it('answers a short message instead of asking what it means', async () => {
    for (const message of ['hi', 'Stream it', 'quick one']) {
      const parts = await ask(message);
      expect(toolCalls(parts), message).toEqual([]);
      expect(finishOf(parts)).toBe('stop');
    }
  });

  it('does not ask the user when another rule already answers a short message', async () => {
    const parts = await ask('2+2');
    expect(toolCalls(parts).map((call) => call.name)).toEqual(['calculator']);
  });

  it('numbers new calls after the calls already in the conversation', async () => {
    const parts = await collect({
      tools: allTools,
      messages: [
        { role: 'user', content: 'What is 1+1?' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [{ id: 'call_1', name: 'calculator', arguments: { expression: '1+1' } }],
        },
        { role: 'tool', toolCallId: 'call_1', toolName: 'calculator', content: '2' },
        { role: 'assistant', content: 'It is 2.', toolCalls: [] },
        { role: 'user', content: 'And 2*3?' },
      ],
    });
    expect(toolCalls(parts)).toEqual([
      { id: 'call_2', name: 'calculator', arguments: { expression: '2*3' } },
    ]);
  });

  it('reports arguments that fail the tool schema as tool-call-invalid', async () => {
    const strictCalculator = toolDefinition(
      'calculator',
      z.object({ formula: z.string() }).strict(),
    );
    const parts = await ask('What is 6 * 7?', { tools: [strictCalculator] });
    expect(parts[0]).toEqual({
      type: 'tool-call-invalid',
      id: 'call_1',
      name: 'calculator',
      rawArguments: '{"expression":"6 * 7"}',
      reason: expect.stringContaining("do not match the tool's parameters"),
    });
    expect(finishOf(parts)).toBe('tool_calls');
  });

  it('fires only rules whose tool is offered', async () => {
    const parts = await ask('What is 2+2 at https://example.com?', { tools: [httpFetch] });
    expect(toolCalls(parts).map((call) => call.name)).toEqual(['http_fetch']);
  });

  it('never calls a tool when toolChoice is none', async () => {
    const parts = await ask('What is 2+2 and what time is it?', { toolChoice: 'none' });
    expect(toolCalls(parts)).toEqual([]);
    expect(textOf(parts)).toMatch(/^\[scripted model\] /);
    expect(finishOf(parts)).toBe('stop');
  });

  it('reports usage before the finish part of a tool-call turn', async () => {
    const parts = await ask('What is 2+2?');
    expect(parts.map((part) => part.type)).toEqual(['tool-call', 'usage', 'finish']);
  });
});
