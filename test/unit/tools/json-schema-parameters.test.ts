import { describe, expect, it } from 'vitest';
import { toolParametersJsonSchema } from '../../../src/llm/tool-arguments.js';
import {
  InvalidParametersSchema,
  MAX_PARAMETERS_SCHEMA_CHARS,
  parametersFromJsonSchema,
} from '../../../src/tools/json-schema-parameters.js';

/**
 * The zod schema of an HTTP or MCP tool's JSON Schema parameters: what
 * Waymark checks of the model's arguments, and what it offers the model.
 */

describe('parametersFromJsonSchema', () => {
  it('offers a pattern to the model but does not match arguments against it (a tenant’s regex could hold the event loop)', () => {
    const schema = {
      type: 'object',
      properties: { q: { type: 'string', pattern: '^(a+)+$' } },
      required: ['q'],
    };
    const parameters = parametersFromJsonSchema(schema);
    // `^(a+)+$` backtracks exponentially on this; unchecked, it is accepted at once.
    expect(parameters.safeParse({ q: `${'a'.repeat(40)}!` }).success).toBe(true);
    expect(parameters.safeParse({ q: 3 }).success).toBe(false);
    expect(parameters.safeParse({}).success).toBe(false);
    // As the model is offered it.
    const offered = toolParametersJsonSchema({ name: 't', description: 'd', parameters });
    expect(offered.properties).toEqual(schema.properties);
  });

  it('leaves a property named "pattern" alone', () => {
    const parameters = parametersFromJsonSchema({
      type: 'object',
      properties: { pattern: { type: 'string' } },
      required: ['pattern'],
      additionalProperties: false,
    });
    expect(parameters.safeParse({ pattern: 'x' }).success).toBe(true);
    expect(parameters.safeParse({}).success).toBe(false);
    expect(parameters.safeParse({ pattern: 'x', other: 1 }).success).toBe(false);
  });

  it('accepts what patternProperties allowed beside additionalProperties: false', () => {
    const parameters = parametersFromJsonSchema({
      type: 'object',
      properties: { name: { type: 'string' } },
      patternProperties: { '^x-': { type: 'string' } },
      additionalProperties: false,
    });
    expect(parameters.safeParse({ name: 'a', 'x-trace': 'b' }).success).toBe(true);
    expect(parameters.safeParse({ name: 3 }).success).toBe(false);
  });

  it('refuses a schema longer than 32 KiB as JSON', () => {
    const properties = Object.fromEntries(
      Array.from({ length: 2000 }, (_, index) => [
        `p${index}`,
        { type: 'string', description: 'x'.repeat(20) },
      ]),
    );
    expect(JSON.stringify(properties).length).toBeGreaterThan(MAX_PARAMETERS_SCHEMA_CHARS);
    expect(() => parametersFromJsonSchema({ type: 'object', properties })).toThrow(
      InvalidParametersSchema,
    );
  });
});
