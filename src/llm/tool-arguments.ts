import { z } from 'zod';
import type { StreamPart, ToolDefinition } from './types.js';

/** JSON Schema of a tool's parameters, as both vendors take it (an object schema). */
export function toolParametersJsonSchema(tool: ToolDefinition): Record<string, unknown> {
  const schema = z.toJSONSchema(tool.parameters, { target: 'draft-7', io: 'input' }) as Record<
    string,
    unknown
  >;
  // The `$schema` keyword is noise to the providers (and some reject it).
  const { $schema: _ignored, ...rest } = schema;
  return rest;
}

/**
 * Turns a tool call assembled from the stream into a `tool-call` part, or a
 * `tool-call-invalid` part when the arguments are not JSON, name no offered
 * tool, or fail its schema: the loop sends that back to the model instead
 * of crashing.
 */
export function toToolCallPart(
  call: { id: string; name: string; rawArguments: string },
  tools: ToolDefinition[] | undefined,
): StreamPart {
  const invalid = (reason: string): StreamPart => ({
    type: 'tool-call-invalid',
    id: call.id,
    name: call.name,
    rawArguments: call.rawArguments,
    reason,
  });
  const tool = tools?.find((candidate) => candidate.name === call.name);
  if (!tool) return invalid(`there is no tool named "${call.name}"`);
  let parsed: unknown;
  try {
    parsed = call.rawArguments.trim() === '' ? {} : JSON.parse(call.rawArguments);
  } catch (error) {
    return invalid(`the arguments are not valid JSON: ${(error as Error).message}`);
  }
  const checked = tool.parameters.safeParse(parsed);
  if (!checked.success) {
    const issues = checked.error.issues.map(
      (issue) => `${issue.path.join('.') || '(arguments)'}: ${issue.message}`,
    );
    return invalid(`the arguments do not match the tool's parameters: ${issues.join('; ')}`);
  }
  return { type: 'tool-call', toolCall: { id: call.id, name: call.name, arguments: checked.data } };
}
