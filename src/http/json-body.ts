import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.js';

/**
 * How deep a JSON body may nest. No schema of the API comes near it (a
 * tool's parameters, the deepest, are a JSON Schema of a few levels), and
 * deeper values would overflow the stack of what recurses over them later
 * (JSON.stringify overflowed at ~4,500 levels in a 9 KB body, a 500).
 */
export const MAX_JSON_DEPTH = 64;

/**
 * A lone UTF-16 surrogate can reach a parsed string only through a `\uD800`
 * to `\uDFFF` escape: the body's bytes are read as UTF-8, which has no
 * surrogates (invalid bytes become U+FFFD). Only then are strings checked.
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/**
 * Replaces Fastify's JSON body parser with the same parser (prototype
 * poisoning refused, empty bodies refused) followed by the checks the
 * schemas cannot make: nesting depth, and text that is valid Unicode.
 * PostgreSQL refuses a lone surrogate in jsonb and stores U+FFFD for it
 * in text, so such a body got a 500, or worse was accepted and failed its
 * workflow when its input was first written as JSON.
 */
export function parseJsonBodies(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    // A string, as parseAs says; typed as either.
    const raw = typeof body === 'string' ? body : body.toString('utf8');
    parse(request, raw, (error, value: unknown) => {
      if (error) {
        done(error, undefined);
        return;
      }
      const refused = refuseUnsupportedJson(value, SURROGATE_ESCAPE.test(raw));
      if (refused) done(refused, undefined);
      else done(null, value);
    });
  });
}

/** Why a parsed body is refused (400), or undefined; `checkText`: look for lone surrogates. */
export function refuseUnsupportedJson(value: unknown, checkText: boolean): AppError | undefined {
  const found = findUnsupported(value, 0, checkText);
  if (!found) return undefined;
  const field = ['body', ...found.path].join('.');
  return found.kind === 'depth'
    ? new AppError({
        code: 'json_too_deep',
        status: 400,
        userMessage: `The body nests deeper than ${MAX_JSON_DEPTH} levels (at ${field})`,
        blame: 'user',
        fields: [{ field, message: `nests deeper than ${MAX_JSON_DEPTH} levels` }],
      })
    : new AppError({
        code: 'invalid_unicode',
        status: 400,
        userMessage: `The body has text that is not valid Unicode (a lone UTF-16 surrogate escape) at ${field}`,
        blame: 'user',
        fields: [{ field, message: 'has a lone UTF-16 surrogate (\\uD800-\\uDFFF) escape' }],
      });
}

interface Unsupported {
  kind: 'depth' | 'unicode';
  /** From the body down to the value, built on the way back up. */
  path: string[];
}

/** Recursion stays shallow: it stops at MAX_JSON_DEPTH. */
function findUnsupported(
  value: unknown,
  depth: number,
  checkText: boolean,
): Unsupported | undefined {
  if (typeof value === 'string') {
    return checkText && !value.isWellFormed() ? { kind: 'unicode', path: [] } : undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_JSON_DEPTH) return { kind: 'depth', path: [] };
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = findUnsupported(value[index], depth + 1, checkText);
      if (found) {
        found.path.unshift(String(index));
        return found;
      }
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (checkText && !key.isWellFormed()) return { kind: 'unicode', path: [key] };
    const found = findUnsupported(item, depth + 1, checkText);
    if (found) {
      found.path.unshift(key);
      return found;
    }
  }
  return undefined;
}
