import cors from '@fastify/cors';
import type { FastifyInstance } from 'fastify';

/**
 * Cross-origin requests from browser pages (a frontend served from another
 * origin than the API): off unless CORS_ALLOWED_ORIGINS names origins,
 * matched exactly, or `*` for any. API keys and stream tokens are sent by
 * the page itself (a header, `?token=`), never as cookies, so credentials
 * are never allowed. A preflight is answered before authentication and
 * rate limiting (its request never carries the Authorization header), and
 * every response to an allowed origin, errors included, says so, so the
 * page can read a problem+json as well as a result.
 */

/** Request headers the API reads beyond the CORS-safelisted ones. */
const ALLOWED_HEADERS = [
  'Authorization',
  'Content-Type',
  'Idempotency-Key',
  'If-Match',
  'Last-Event-ID',
  'X-Request-Id',
];

/** Response headers a page may read beyond the CORS-safelisted ones. */
const EXPOSED_HEADERS = [
  'Location',
  'Idempotent-Replayed',
  'Retry-After',
  'X-Request-Id',
  'X-RateLimit-Limit',
  'X-RateLimit-Remaining',
  'X-RateLimit-Reset',
];

const METHODS = ['GET', 'HEAD', 'POST', 'PATCH', 'DELETE'];

/** How long a browser may reuse a preflight's answer. */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/** `*`, or an http(s) origin as a browser sends it: scheme, host, port if not the default; no path, no trailing slash. */
export function isOrigin(value: string): boolean {
  if (value === '*') return true;
  try {
    const url = new URL(value);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.origin === value;
  } catch {
    return false;
  }
}

export type CorsHeaders = Record<string, string>;

/**
 * The headers that mark a response to `origin` as @fastify/cors's hook
 * does, for responses answered before any hook runs (the router's own
 * refusals); none for an origin not allowed, or no origin.
 */
export function corsHeadersFor(origins: readonly string[]) {
  const exposed = EXPOSED_HEADERS.join(', ');
  return (origin: string | undefined): CorsHeaders => {
    if (origins.includes('*')) {
      return { 'access-control-allow-origin': '*', 'access-control-expose-headers': exposed };
    }
    if (origin === undefined || !origins.includes(origin)) return {};
    return {
      'access-control-allow-origin': origin,
      'access-control-expose-headers': exposed,
      vary: 'Origin',
    };
  };
}

/** Answers preflights and marks responses to the allowed origins; registers nothing when there are none. */
export async function registerCors(
  app: FastifyInstance,
  origins: readonly string[],
): Promise<void> {
  if (origins.length === 0) return;
  await app.register(cors, {
    origin: origins.includes('*') ? '*' : [...origins],
    methods: METHODS,
    allowedHeaders: ALLOWED_HEADERS,
    exposedHeaders: EXPOSED_HEADERS,
    maxAge: PREFLIGHT_MAX_AGE_SECONDS,
    credentials: false,
    // Every OPTIONS request is answered as a preflight, 204: the strict
    // mode's answer to one without the preflight headers is a text/plain
    // 400, not a problem+json.
    strictPreflight: false,
  });
}
