import { describe, expect, it } from 'vitest';
import { createToolCallAssembler } from '../../../../src/llm/openai/assemble-tool-calls.js';
import { ArgumentBudget } from '../../../../src/llm/output-bound.js';

/** 16 x 64 = 1,024 characters of arguments, all calls of the turn together. */
const budget = () =>
  new ArgumentBudget({ provider: 'openai', model: 'gpt-test', maxOutputTokens: 16 });

describe('createToolCallAssembler', () => {
  it('assembles interleaved parallel calls by index, in index order', () => {
    const assembler = createToolCallAssembler(budget());
    assembler.add({
      index: 1,
      id: 'b',
      type: 'function',
      function: { name: 'two', arguments: '' },
    });
    assembler.add({
      index: 0,
      id: 'a',
      type: 'function',
      function: { name: 'one', arguments: '{"x"' },
    });
    assembler.add({ index: 1, function: { arguments: '{"y":2}' } });
    assembler.add({ index: 0, function: { arguments: ':1}' } });
    expect(assembler.drain()).toEqual([
      { id: 'a', name: 'one', rawArguments: '{"x":1}' },
      { id: 'b', name: 'two', rawArguments: '{"y":2}' },
    ]);
    expect(assembler.drain()).toEqual([]);
  });

  it('keeps the first name when a server repeats it and makes up an id when none is sent', () => {
    const assembler = createToolCallAssembler(budget());
    assembler.add({ index: 0, function: { name: 'one', arguments: '{' } });
    assembler.add({ index: 0, function: { name: 'one', arguments: '}' } });
    expect(assembler.drain()).toEqual([{ id: 'call_0', name: 'one', rawArguments: '{}' }]);
  });

  it('arguments past the output bound, over all the calls, throw as they arrive', () => {
    const assembler = createToolCallAssembler(budget());
    assembler.add({ index: 0, id: 'a', function: { name: 'one', arguments: 'x'.repeat(600) } });
    assembler.add({ index: 1, id: 'b', function: { name: 'two', arguments: 'y'.repeat(424) } });
    expect(() => assembler.add({ index: 1, function: { arguments: 'y' } })).toThrow(
      expect.objectContaining({
        kind: 'stream_interrupted',
        provider: 'openai',
        model: 'gpt-test',
        detail: 'the tool-call arguments passed 1024 characters, past its 16 tokens',
      }),
    );
  });
});
