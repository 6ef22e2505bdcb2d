import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  toMessageList,
  toMessageParams,
  toSystemBlocks,
} from '../../../../src/llm/anthropic/convert-messages.js';
import type { Message, ToolDefinition } from '../../../../src/llm/types.js';

const model = { modelId: 'claude-test', maxOutputTokens: 4096 };

const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'Weather for a city',
  parameters: z.object({ city: z.string() }),
};

describe('toSystemBlocks', () => {
  it('puts cache_control on the stable block only, volatile after it', () => {
    expect(toSystemBlocks({ stable: 'You are Waymark.', volatile: 'Now: 12:00' })).toEqual([
      { type: 'text', text: 'You are Waymark.', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Now: 12:00' },
    ]);
  });

  it('leaves out empty parts', () => {
    expect(toSystemBlocks({ stable: 'S' })).toHaveLength(1);
    expect(toSystemBlocks({ stable: '', volatile: 'V' })).toEqual([{ type: 'text', text: 'V' }]);
    expect(toSystemBlocks(undefined)).toEqual([]);
  });

  it('leaves out whitespace-only parts, which Anthropic refuses as text blocks', () => {
    expect(toSystemBlocks({ stable: ' \n', volatile: 'V' })).toEqual([{ type: 'text', text: 'V' }]);
    expect(toSystemBlocks({ stable: 'S', volatile: '\t ' })).toHaveLength(1);
  });
});

describe('toMessageList', () => {
  const toolTurn: Message[] = [
    { role: 'user', content: 'Weather in Oslo and Rome?' },
    {
      role: 'assistant',
      content: 'Checking.',
      toolCalls: [
        { id: 'tu_1', name: 'get_weather', arguments: { city: 'Oslo' } },
        { id: 'tu_2', name: 'get_weather', arguments: { city: 'Rome' } },
      ],
    },
    { role: 'tool', toolCallId: 'tu_1', toolName: 'get_weather', content: '3°C' },
    {
      role: 'tool',
      toolCallId: 'tu_2',
      toolName: 'get_weather',
      content: 'unavailable',
      isError: true,
    },
  ];

  it('turns an assistant message into text then tool_use blocks', () => {
    const [, assistant] = toMessageList(toolTurn);
    expect(assistant).toEqual({
      role: 'assistant',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'tu_1', name: 'get_weather', input: { city: 'Oslo' } },
        { type: 'tool_use', id: 'tu_2', name: 'get_weather', input: { city: 'Rome' } },
      ],
    });
  });

  it('merges consecutive tool results into one following user message', () => {
    const list = toMessageList(toolTurn);
    expect(list.map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
    expect(list[2]?.content).toEqual([
      { type: 'tool_result', tool_use_id: 'tu_1', content: '3°C', is_error: false },
      { type: 'tool_result', tool_use_id: 'tu_2', content: 'unavailable', is_error: true },
    ]);
  });

  it('puts a user text that follows tool results after them, in the same message', () => {
    const list = toMessageList([...toolTurn, { role: 'user', content: 'Also Paris?' }]);
    expect(list.map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
    const content = list[2]?.content as { type: string }[];
    expect(content.map((block) => block.type)).toEqual(['tool_result', 'tool_result', 'text']);
    expect(content[2]).toEqual({ type: 'text', text: 'Also Paris?' });
  });

  it('sends an assistant message without text as tool_use blocks only', () => {
    const list = toMessageList([
      { role: 'user', content: 'Go' },
      { role: 'assistant', content: '', toolCalls: [{ id: 't', name: 'n', arguments: 'bad' }] },
    ]);
    expect(list[1]?.content).toEqual([{ type: 'tool_use', id: 't', name: 'n', input: {} }]);
  });

  it('sends no whitespace-only text: a turn of a bare newline and a tool call, a blank tool result', () => {
    const list = toMessageList([
      { role: 'user', content: 'Weather in Oslo?' },
      {
        role: 'assistant',
        content: '\n\n',
        toolCalls: [{ id: 'tu_1', name: 'get_weather', arguments: { city: 'Oslo' } }],
      },
      { role: 'tool', toolCallId: 'tu_1', toolName: 'get_weather', content: ' \n' },
    ]);
    expect(list).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 'tu_1', name: 'get_weather', input: { city: 'Oslo' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_1', is_error: false }] },
    ]);
  });

  it('leaves out a whitespace-only assistant turn; the user texts around it share one message', () => {
    const list = toMessageList([
      { role: 'user', content: 'Plan it.' },
      { role: 'assistant', content: '  \n', toolCalls: [] },
      { role: 'user', content: 'Reply with the plan.' },
    ]);
    expect(list).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Plan it.' },
          { type: 'text', text: 'Reply with the plan.' },
        ],
      },
    ]);
  });
});

describe('toMessageList: tool_use ids Anthropic takes (unique, ^[a-zA-Z0-9_-]+$)', () => {
  type Block = { type: string; id?: string; tool_use_id?: string };
  const blocksOf = (messages: Message[]): Block[] =>
    toMessageList(messages).flatMap((message) =>
      typeof message.content === 'string' ? [] : (message.content as Block[]),
    );
  const idsOf = (blocks: Block[], type: 'tool_use' | 'tool_result') =>
    blocks
      .filter((block) => block.type === type)
      .map((block) => (type === 'tool_use' ? block.id : block.tool_use_id));
  const turn = (id: string, city: string, content: string): Message[] => [
    {
      role: 'assistant',
      content: '',
      toolCalls: [{ id, name: 'get_weather', arguments: { city } }],
    },
    { role: 'tool', toolCallId: id, toolName: 'get_weather', content },
  ];
  // Two turns of an OpenAI-compatible model that sent no call ids: both calls are `call_0`.
  const idless: Message[] = [
    { role: 'user', content: 'Weather in Oslo, then in Rome?' },
    ...turn('call_0', 'Oslo', '3°C'),
    ...turn('call_0', 'Rome', '18°C'),
  ];

  it('an id repeated across turns is made unique, each result pointing at its own call', () => {
    const blocks = blocksOf(idless);
    expect(idsOf(blocks, 'tool_use')).toEqual(['call_0', 'call_0_2']);
    expect(idsOf(blocks, 'tool_result')).toEqual(['call_0', 'call_0_2']);
  });

  it('an id outside the pattern has its other characters replaced, in its call and its result', () => {
    const blocks = blocksOf([
      { role: 'user', content: 'Look it up' },
      ...turn('functions.lookup:0', 'Oslo', 'ok'),
      ...turn('', 'Rome', 'ok'),
    ]);
    expect(idsOf(blocks, 'tool_use')).toEqual(['functions_lookup_0', 'call']);
    expect(idsOf(blocks, 'tool_result')).toEqual(['functions_lookup_0', 'call']);
  });

  it('an id repeated within one turn: its results answer the calls in order', () => {
    const blocks = blocksOf([
      { role: 'user', content: 'Oslo and Rome?' },
      {
        role: 'assistant',
        content: '',
        toolCalls: [
          { id: 'c', name: 'get_weather', arguments: { city: 'Oslo' } },
          { id: 'c', name: 'get_weather', arguments: { city: 'Rome' } },
        ],
      },
      { role: 'tool', toolCallId: 'c', toolName: 'get_weather', content: '3°C' },
      { role: 'tool', toolCallId: 'c', toolName: 'get_weather', content: '18°C' },
    ]);
    expect(idsOf(blocks, 'tool_use')).toEqual(['c', 'c_2']);
    expect(idsOf(blocks, 'tool_result')).toEqual(['c', 'c_2']);
  });

  it('ids Anthropic takes go out as they are, and the history keeps its own ids', () => {
    const history: Message[] = [
      { role: 'user', content: 'Weather?' },
      ...turn('toolu_01A', 'Oslo', '3°C'),
      ...turn('call_0', 'Rome', '18°C'),
      ...turn('call_0', 'Paris', '12°C'),
    ];
    const before = structuredClone(history);
    expect(idsOf(blocksOf(history), 'tool_use')).toEqual(['toolu_01A', 'call_0', 'call_0_2']);
    expect(history).toEqual(before);
  });

  it('a turn’s ids read the same in every later request (the prompt cache keeps matching)', () => {
    const earlier = toMessageList(idless.slice(0, 3));
    const later = toMessageList([...idless, ...turn('call_0', 'Paris', '12°C')]);
    expect(later.slice(0, earlier.length)).toEqual(earlier);
  });
});

describe('toMessageParams', () => {
  it('maps tools, tool choice, system and max_tokens', () => {
    const params = toMessageParams(
      {
        system: { stable: 'Stable', volatile: 'Volatile' },
        messages: [{ role: 'user', content: 'Hi' }],
        tools: [weather],
        toolChoice: 'required',
        maxOutputTokens: 1000,
      },
      model,
    );
    expect(params.model).toBe('claude-test');
    expect(params.max_tokens).toBe(1000);
    expect(params.system).toHaveLength(2);
    expect(params.tool_choice).toEqual({ type: 'any' });
    expect(params.tools).toEqual([
      {
        name: 'get_weather',
        description: 'Weather for a city',
        input_schema: expect.objectContaining({
          type: 'object',
          properties: { city: { type: 'string' } },
          required: ['city'],
        }),
      },
    ]);
    expect(params.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }]);
  });

  it.each([
    [undefined, { type: 'auto' }],
    ['auto', { type: 'auto' }],
    ['none', { type: 'none' }],
    ['required', { type: 'any' }],
  ] as const)('tool choice %s -> %o', (toolChoice, expected) => {
    const params = toMessageParams({ messages: [], tools: [weather], toolChoice }, model);
    expect(params.tool_choice).toEqual(expected);
  });

  it('caps max_tokens by the model and defaults to its maximum', () => {
    expect(toMessageParams({ messages: [], maxOutputTokens: 99_999 }, model).max_tokens).toBe(4096);
    expect(toMessageParams({ messages: [] }, model).max_tokens).toBe(4096);
  });

  it('sends neither tools nor tool_choice nor system when there are none', () => {
    const params = toMessageParams({ messages: [], toolChoice: 'required' }, model);
    expect(params).not.toHaveProperty('tools');
    expect(params).not.toHaveProperty('tool_choice');
    expect(params).not.toHaveProperty('system');
  });
});
