import { describe, expect, it } from 'vitest';
import { createToolCallAssembler } from '../../../../src/llm/openai/assemble-tool-calls.js';

describe('createToolCallAssembler', () => {
  it('assembles interleaved parallel calls by index, in index order', () => {
    const assembler = createToolCallAssembler();
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
    const assembler = createToolCallAssembler();
    assembler.add({ index: 0, function: { name: 'one', arguments: '{' } });
    assembler.add({ index: 0, function: { name: 'one', arguments: '}' } });
    expect(assembler.drain()).toEqual([{ id: 'call_0', name: 'one', rawArguments: '{}' }]);
  });
});
