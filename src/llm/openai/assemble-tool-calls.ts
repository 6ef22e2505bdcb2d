import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import type { ArgumentBudget } from '../output-bound.js';

type ToolCallDelta = NonNullable<ChatCompletionChunk.Choice.Delta['tool_calls']>[number];

export interface AssembledToolCall {
  id: string;
  name: string;
  rawArguments: string;
}

/**
 * Collects streamed tool-call fragments. Chat Completions sends the id and
 * name in the first delta of a call and the JSON arguments in pieces after
 * it, all keyed by `index` (parallel calls interleave). `argumentBudget`
 * bounds the arguments it holds: `add` throws past it.
 */
export function createToolCallAssembler(argumentBudget: ArgumentBudget) {
  const calls = new Map<number, AssembledToolCall>();
  return {
    add(delta: ToolCallDelta): void {
      const call = calls.get(delta.index) ?? { id: '', name: '', rawArguments: '' };
      if (delta.id) call.id = delta.id;
      // Some compatible servers repeat the name in every delta: keep the first.
      if (delta.function?.name && !call.name) call.name = delta.function.name;
      if (delta.function?.arguments) {
        argumentBudget.add(delta.function.arguments);
        call.rawArguments += delta.function.arguments;
      }
      calls.set(delta.index, call);
    },
    /** The calls in index order; empties the assembler. */
    drain(): AssembledToolCall[] {
      const done = [...calls.entries()]
        .sort(([a], [b]) => a - b)
        .map(([index, call]) => ({ ...call, id: call.id || `call_${index}` }));
      calls.clear();
      return done;
    },
  };
}
