import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.js';
import { findUnsupportedJson, MAX_JSON_DEPTH } from '../json-limits.js';

/**
 * Replaces Fastify's JSON body parser with the same parser (prototype
 * poisoning refused, empty bodies refused) followed by the checks the
 * schemas cannot make (json-limits.ts): nesting depth, and text that is
 * valid Unicode. Before, such a body got a 500, or worse was accepted and
 * failed its workflow when its input was first written as JSON.
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
      const refused = refuseUnsupportedJson(value, raw);
      if (refused) done(refused, undefined);
      else done(null, value);
    });
  });
}

/** Why a body parsed from `raw` is refused (400), or undefined. */
function refuseUnsupportedJson(value: unknown, raw: string): AppError | undefined {
  const found = findUnsupportedJson(value, raw);
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
