import type { z } from 'zod';
import { scriptedModel } from '../../../../src/llm/scripted/index.js';
import type {
  LanguageModel,
  ModelRequest,
  StreamPart,
  ToolCall,
  ToolDefinition,
} from '../../../../src/llm/types.js';

/** Streams one turn to the end and returns its parts. */
export async function collect(
  request: ModelRequest,
  options: { model?: LanguageModel; signal?: AbortSignal } = {},
): Promise<StreamPart[]> {
  const model = options.model ?? scriptedModel({});
  const parts: StreamPart[] = [];
  for await (const part of model.stream(request, {
    signal: options.signal ?? new AbortController().signal,
  })) {
    parts.push(part);
  }
  return parts;
}

export function textOf(parts: StreamPart[]): string {
  return parts.map((part) => (part.type === 'text-delta' ? part.text : '')).join('');
}

export function finishOf(parts: StreamPart[]): string | undefined {
  const last = parts.at(-1);
  return last?.type === 'finish' ? last.reason : undefined;
}

/** The tool calls among the parts, in order. */
export function toolCalls(parts: StreamPart[]): ToolCall[] {
  return parts.flatMap((part) => (part.type === 'tool-call' ? [part.toolCall] : []));
}

/** A tool as the model is offered it, with the given parameters (a built-in's own, in these tests). */
export function toolDefinition(name: string, parameters: z.ZodType): ToolDefinition {
  return { name, description: `the ${name} tool`, parameters };
}
