import { z } from 'zod';
import {
  findUnsupportedJson,
  MAX_JSON_DEPTH,
  storableText,
  type UnsupportedJson,
} from '../json-limits.js';
import type { StreamPart, ToolDefinition } from './types.js';

/**
 * Converted schemas by the zod schema they come from. A pure memo, the one
 * module-level state here on purpose: schemas are immutable and live as
 * long as their tool, and converting one costs more than the rest of a
 * request's preparation (every request offers every tool, and the tool loop
 * estimates each request's tokens before sending it). Weak, so a tool
 * dropped with its run (an MCP server's) is not kept.
 */
const jsonSchemas = new WeakMap<object, Record<string, unknown>>();

/** JSON Schema of a tool's parameters, as both vendors take it (an object schema). Do not mutate it. */
export function toolParametersJsonSchema(tool: ToolDefinition): Record<string, unknown> {
  const known = jsonSchemas.get(tool.parameters);
  if (known) return known;
  const schema = z.toJSONSchema(tool.parameters, { target: 'draft-7', io: 'input' }) as Record<
    string,
    unknown
  >;
  // The `$schema` keyword is noise to the providers (and some reject it).
  const { $schema: _ignored, ...rest } = schema;
  jsonSchemas.set(tool.parameters, rest);
  return rest;
}

const UNSUPPORTED_ARGUMENTS: Record<UnsupportedJson['kind'], string> = {
  depth: `nest deeper than ${MAX_JSON_DEPTH} levels`,
  unicode: 'hold text that is not valid Unicode, a lone UTF-16 surrogate escape',
  nul: 'hold a NUL character (\\u0000), which no text may contain',
};

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
  // What the model sent, kept in the turn's state: storable even when it is
  // no call at all (a NUL in a raw argument text or a name would fail the write).
  const invalid = (reason: string): StreamPart => ({
    type: 'tool-call-invalid',
    id: storableText(call.id),
    name: storableText(call.name),
    rawArguments: storableText(call.rawArguments),
    reason: storableText(reason),
  });
  const tool = tools?.find((candidate) => candidate.name === call.name);
  if (!tool) return invalid(`there is no tool named "${call.name}"`);
  let parsed: unknown;
  try {
    parsed = call.rawArguments.trim() === '' ? {} : JSON.parse(call.rawArguments);
  } catch (error) {
    return invalid(`the arguments are not valid JSON: ${(error as Error).message}`);
  }
  const unsupported = findUnsupportedJson(parsed, call.rawArguments, { nul: true });
  if (unsupported) {
    const at = unsupported.path.join('.') || '(arguments)';
    return invalid(`the arguments ${UNSUPPORTED_ARGUMENTS[unsupported.kind]} (at ${at})`);
  }
  const checked = tool.parameters.safeParse(parsed);
  if (!checked.success) {
    const issues = checked.error.issues.map(
      (issue) => `${issue.path.join('.') || '(arguments)'}: ${issue.message}`,
    );
    return invalid(`the arguments do not match the tool's parameters: ${issues.join('; ')}`);
  }
  return {
    type: 'tool-call',
    toolCall: { id: storableText(call.id), name: call.name, arguments: checked.data },
    argumentChars: call.rawArguments.length,
  };
}
