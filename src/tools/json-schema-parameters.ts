import { z } from 'zod';

/**
 * Tool parameters given as JSON Schema (HTTP tools, MCP tools) turned into
 * the zod schema the `Tool` interface takes. zod validates the model's
 * arguments; the model is offered the JSON Schema as its author wrote it
 * (attached as metadata, which `z.toJSONSchema` puts over the top-level
 * keys it derives), so no keyword zod does not model is lost on the way.
 * The one addition is `additionalProperties: {}` where none was given,
 * which means the same as its absence.
 *
 * `pattern` and `patternProperties` are offered but not checked: their
 * regular expressions are the tenant's (or an MCP server's), and one like
 * `^(a+)+$` takes seconds of the event loop, every tenant's, on a
 * 28-character argument, doubling with each more. The tool checks its own
 * arguments against them.
 */

export type JsonSchemaObject = Record<string, unknown>;

/** Large enough for any real tool; every byte of it is sent to the model at each turn. */
export const MAX_PARAMETERS_SCHEMA_CHARS = 32 * 1024;

const JSON_TYPES = ['object', 'array', 'string', 'number', 'integer', 'boolean', 'null'] as const;

const count = z.number().int().nonnegative();

/**
 * The structure of the common keywords, checked because `z.fromJSONSchema`
 * silently ignores a malformed one (`properties: 3`, `required: "a"`) and
 * the tool would then accept anything. Other keywords pass through.
 */
const schemaShape: z.ZodType<unknown> = z.lazy(() =>
  z.union([
    z.boolean(),
    z
      .object({
        type: z.union([z.enum(JSON_TYPES), z.array(z.enum(JSON_TYPES)).min(1)]).optional(),
        properties: z.record(z.string(), schemaShape).optional(),
        $defs: z.record(z.string(), schemaShape).optional(),
        definitions: z.record(z.string(), schemaShape).optional(),
        required: z.array(z.string()).optional(),
        additionalProperties: schemaShape.optional(),
        items: schemaShape.optional(),
        enum: z.array(z.unknown()).min(1).optional(),
        anyOf: z.array(schemaShape).min(1).optional(),
        oneOf: z.array(schemaShape).min(1).optional(),
        allOf: z.array(schemaShape).min(1).optional(),
        description: z.string().optional(),
        minLength: count.optional(),
        maxLength: count.optional(),
        minItems: count.optional(),
        maxItems: count.optional(),
        minimum: z.number().optional(),
        maximum: z.number().optional(),
        pattern: z.string().refine(isRegExp, 'not a valid regular expression').optional(),
        // zod keeps every schema with an `id` in a global map (and emits it as a `$ref`):
        // per workflow, that would pin each tool's schema in memory for good.
        id: z
          .undefined({ error: 'the draft-4 "id" keyword is not supported; use "$id"' })
          .optional(),
      })
      .loose(),
  ]),
);

function isRegExp(pattern: string): boolean {
  try {
    new RegExp(pattern);
    return true;
  } catch {
    return false;
  }
}

export class InvalidParametersSchema extends Error {
  override name = 'InvalidParametersSchema';
}

/**
 * The zod schema of a tool's JSON Schema parameters. Throws
 * `InvalidParametersSchema` with a reason a tool author can act on: the
 * root must be an object schema (both vendors require one), the common
 * keywords well-formed, and every `$ref` resolvable.
 */
export function parametersFromJsonSchema(schema: JsonSchemaObject): z.ZodType {
  if (schema.type !== 'object') {
    throw new InvalidParametersSchema('the parameters schema must have "type": "object"');
  }
  if (JSON.stringify(schema).length > MAX_PARAMETERS_SCHEMA_CHARS) {
    throw new InvalidParametersSchema(
      `longer than ${MAX_PARAMETERS_SCHEMA_CHARS} characters as JSON`,
    );
  }
  const shape = schemaShape.safeParse(schema);
  if (!shape.success) {
    const issue = shape.error.issues[0];
    const where = issue?.path.length ? issue.path.join('.') : '(root)';
    throw new InvalidParametersSchema(`${where}: ${issue?.message ?? 'not a JSON Schema'}`);
  }
  let converted: z.ZodType;
  try {
    converted = z.fromJSONSchema(withoutPatterns(schema) as Parameters<typeof z.fromJSONSchema>[0]);
  } catch (error) {
    throw new InvalidParametersSchema((error as Error).message);
  }
  // Metadata lives in a WeakMap and goes with the schema (no `id`: refused above).
  return converted.meta(schema);
}

/** Keywords whose values are schemas, keyed by name (`properties`) or listed (`anyOf`). */
const SCHEMA_MAPS = ['properties', '$defs', 'definitions', 'dependentSchemas'] as const;
const SCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems'] as const;
const SCHEMA_VALUES = [
  'items',
  'additionalProperties',
  'not',
  'if',
  'then',
  'else',
  'contains',
  'propertyNames',
  'unevaluatedItems',
  'unevaluatedProperties',
] as const;

/**
 * A copy of `schema` without `pattern` and `patternProperties` where they
 * are keywords (a property may be named "pattern"), for the checks
 * Waymark makes; the model is offered the schema as written. Checks are
 * left out, never made stricter.
 */
function withoutPatterns(schema: unknown): unknown {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return schema;
  const { pattern: _pattern, patternProperties, ...rest } = schema as Record<string, unknown>;
  // What `patternProperties` allowed is no longer told from additional properties: leave them unchecked.
  if (patternProperties !== undefined) delete rest.additionalProperties;
  for (const key of SCHEMA_MAPS) {
    const map = rest[key];
    if (typeof map === 'object' && map !== null && !Array.isArray(map)) {
      rest[key] = Object.fromEntries(
        Object.entries(map).map(([name, value]) => [name, withoutPatterns(value)]),
      );
    }
  }
  for (const key of SCHEMA_LISTS) {
    const list = rest[key];
    if (Array.isArray(list)) rest[key] = list.map(withoutPatterns);
  }
  for (const key of SCHEMA_VALUES) {
    if (key in rest)
      rest[key] = Array.isArray(rest[key])
        ? (rest[key] as unknown[]).map(withoutPatterns)
        : withoutPatterns(rest[key]);
  }
  return rest;
}
