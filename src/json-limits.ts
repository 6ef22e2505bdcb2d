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

/** The NUL character reaches a parsed string only through a `\u0000` escape; PostgreSQL stores it in neither text nor jsonb. */
const NUL_ESCAPE = /\\u0000/;

export interface UnsupportedJson {
  /** `unicode`: a lone surrogate; `nul`: a NUL character (with `nul` asked for). */
  kind: 'depth' | 'unicode' | 'nul';
  /** Keys and indexes from the value down to the place. */
  path: string[];
}

/**
 * The first place where `value` (parsed from `text`) nests deeper than
 * MAX_JSON_DEPTH, counting the value itself as level 1, or holds a string
 * or key that is not well-formed Unicode, or (`nul`) holds a NUL
 * character; undefined when there is none. (Request bodies refuse NUL field
 * by field, in their schemas.)
 */
export function findUnsupportedJson(
  value: unknown,
  text: string,
  options: { nul?: boolean } = {},
): UnsupportedJson | undefined {
  const check: TextCheck = {
    surrogates: SURROGATE_ESCAPE.test(text),
    nul: options.nul === true && NUL_ESCAPE.test(text),
  };
  return findFrom(value, 0, check);
}

/**
 * Text PostgreSQL can store in text and jsonb, from text a third party
 * wrote (a model, a tool): half a character (a lone surrogate, from text cut
 * by UTF-16 units) and NUL each become U+FFFD, as an invalid byte of UTF-8
 * text does. PostgreSQL refuses both, which failed the workflow at its
 * next write.
 */
export function storableText(text: string): string {
  return withoutNul(text.toWellFormed());
}

/**
 * A piece of streamed text as a text parameter takes it (token chunks in a
 * NOTIFY): NUL becomes U+FFFD. Half a character is left alone, as its other
 * half may come in the next chunk; node-postgres sends it as U+FFFD anyway.
 */
export function withoutNul(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
}

interface TextCheck {
  surrogates: boolean;
  nul: boolean;
}

function textProblem(text: string, check: TextCheck): UnsupportedJson['kind'] | undefined {
  if (check.surrogates && !text.isWellFormed()) return 'unicode';
  if (check.nul && text.includes('\u0000')) return 'nul';
  return undefined;
}

/** Recursion stays shallow: it stops at MAX_JSON_DEPTH. */
function findFrom(value: unknown, depth: number, check: TextCheck): UnsupportedJson | undefined {
  if (typeof value === 'string') {
    const kind = textProblem(value, check);
    return kind && { kind, path: [] };
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_JSON_DEPTH) return { kind: 'depth', path: [] };
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = findFrom(value[index], depth + 1, check);
      if (found) {
        found.path.unshift(String(index));
        return found;
      }
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const kind = textProblem(key, check);
    if (kind) return { kind, path: [key] };
    const found = findFrom(item, depth + 1, check);
    if (found) {
      found.path.unshift(key);
      return found;
    }
  }
  return undefined;
}

/** V8's quote of the text around a syntax error: `..."<text>"... is not valid JSON`, or the whole of a short text. */
const QUOTED_SOURCE = /(?:^|, )(?:\.\.\.)?"[\s\S]*"(?:\.\.\.)? is not valid JSON$/;

/**
 * Why JSON.parse refused a text, without quoting the text, which V8 does
 * (`Unexpected token 'o', ..."X-Api-Key":tok-abc"... is not valid JSON`):
 * the text may hold a secret, a key typed without its quotes in a request
 * body (the 400's message is also its log line) or pasted in place of
 * WAYMARK_MODELS (the configuration error goes to stderr).
 */
export function jsonSyntaxProblem(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(QUOTED_SOURCE, '') || 'unexpected text';
}
