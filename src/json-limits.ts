/**
 * What PostgreSQL's jsonb and our own recursion over parsed JSON cannot
 * take, wherever JSON comes from: a request's body (http/json-body.ts,
 * refused with a 400) or a model's tool-call arguments (llm/tool-arguments.ts,
 * sent back to the model as an invalid call).
 */

/**
 * How deep a parsed JSON value may nest. No schema of the API or of a tool
 * comes near it (a tool's parameters, the deepest, are a JSON Schema of a
 * few levels); deeper values would overflow the stack of what recurses over
 * them (JSON.stringify overflowed at ~4,500 levels in a 9 KB body, a 500).
 */
export const MAX_JSON_DEPTH = 64;

/**
 * A lone UTF-16 surrogate can reach a parsed string only through a `\uD800`
 * to `\uDFFF` escape in the JSON text: text read as UTF-8 has no surrogates
 * (invalid bytes become U+FFFD). Strings need checking only when it matches.
 * PostgreSQL refuses a lone surrogate in jsonb and stores U+FFFD for it in
 * text.
 */
export const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

export interface UnsupportedJson {
  kind: 'depth' | 'unicode';
  /** Keys and indexes from the value down to the place. */
  path: string[];
}

/**
 * The first place where `value` (parsed from `text`) nests deeper than
 * MAX_JSON_DEPTH, counting the value itself as level 1, or holds a string
 * or key that is not well-formed Unicode; undefined when there is none.
 */
export function findUnsupportedJson(value: unknown, text: string): UnsupportedJson | undefined {
  return findFrom(value, 0, SURROGATE_ESCAPE.test(text));
}

/** Recursion stays shallow: it stops at MAX_JSON_DEPTH. */
function findFrom(value: unknown, depth: number, checkText: boolean): UnsupportedJson | undefined {
  if (typeof value === 'string') {
    return checkText && !value.isWellFormed() ? { kind: 'unicode', path: [] } : undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_JSON_DEPTH) return { kind: 'depth', path: [] };
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = findFrom(value[index], depth + 1, checkText);
      if (found) {
        found.path.unshift(String(index));
        return found;
      }
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (checkText && !key.isWellFormed()) return { kind: 'unicode', path: [key] };
    const found = findFrom(item, depth + 1, checkText);
    if (found) {
      found.path.unshift(key);
      return found;
    }
  }
  return undefined;
}
