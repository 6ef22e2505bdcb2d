import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { AppError, badRequest } from '../errors.js';
import { findUnsupportedJson, jsonSyntaxProblem, MAX_JSON_DEPTH } from '../json-limits.js';

/** The charset parameter of a Content-Type, lower-cased, when it has one. */
const CHARSET = /;\s*charset\s*=\s*"?([^";\s]+)/i;

/**
 * Fastify's JSON body parsing, made by us so that each refusal says what
 * is wrong: secure-json-parse as Fastify uses it (a `__proto__` key, or a
 * `constructor` with a `prototype`, refused: prototype poisoning), then the
 * checks the schemas cannot make (json-limits.ts): nesting depth, and text
 * that is valid Unicode. Before, such a body got a 500, or worse was
 * accepted and failed its workflow when its input was first written as
 * JSON; and Fastify's parser said "not valid JSON" for all of them, with no
 * position. A body said to be in another charset than UTF-8 (which JSON
 * requires, RFC 8259) is refused rather than misread.
 */
export function parseJsonBodies(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    // A string, as parseAs says; typed as either.
    const raw = typeof body === 'string' ? body : body.toString('utf8');
    const parsed = parseJsonBody(raw, request.headers['content-type']);
    if (parsed instanceof AppError) done(parsed, undefined);
    else done(null, parsed.value);
  });
}

/** The body's value, or why it is refused. */
export function parseJsonBody(
  raw: string,
  contentType: string | undefined,
): { value: unknown } | AppError {
  const charset = CHARSET.exec(contentType ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    return new AppError({
      code: 'unsupported_media_type',
      status: 415,
      userMessage: `Send the body as application/json in UTF-8, not ${charset}`,
      blame: 'user',
    });
  }
  if (raw.length === 0) {
    return badRequest(
      'empty_json_body',
      'The body is empty although Content-Type is application/json',
    );
  }
  let value: unknown;
  try {
    value = secureJson.parse(raw, null, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return message.startsWith('Object contains forbidden')
      ? badRequest(
          'forbidden_json_key',
          'The body has a "__proto__" key, or a "constructor" key holding "prototype": refused (prototype poisoning)',
        )
      : badRequest('malformed_json', `The body is not valid JSON: ${jsonSyntaxProblem(error)}`);
  }
  return refuseUnsupportedJson(value, raw) ?? { value };
}

/** Why a body parsed from `raw` is refused (400), or undefined. */
function refuseUnsupportedJson(value: unknown, raw: string): AppError | undefined {
  const found = findUnsupportedJson(value, raw);
  if (!found) return undefined;
  const field = ['body', ...found.path].join('.');
  return found.kind === 'depth'
    ? badRequest(
        'json_too_deep',
        `The body nests deeper than ${MAX_JSON_DEPTH} levels (at ${field})`,
        [{ field, message: `nests deeper than ${MAX_JSON_DEPTH} levels` }],
      )
    : badRequest(
        'invalid_unicode',
        `The body has text that is not valid Unicode (a lone UTF-16 surrogate escape) at ${field}`,
        [{ field, message: 'has a lone UTF-16 surrogate (\\uD800-\\uDFFF) escape' }],
      );
}
