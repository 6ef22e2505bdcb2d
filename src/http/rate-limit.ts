import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { tooManyRequests } from '../errors.js';
import type { RateLimitCounts, RateLimitRule } from '../tenancy/rate-limit-counts.js';

export interface RateLimitOptions {
  counts: RateLimitCounts;
  /** RATE_LIMIT_MAX: a tenant's limit unless the operator gave it its own. */
  defaultMax: number;
  windowMs: number;
}

/**
 * The rate limit, as an onRequest hook run right after authentication's:
 * a request counts against its tenant's limit (all its keys and stream
 * tokens draw on one, so issuing itself more keys gives a tenant no more)
 * and, when its API key has one of its own, against the key's too, before
 * its body is read and validated. Counted in sliding windows the replicas
 * share (tenancy/rate-limit-counts.ts). Every answer let through says the
 * limit with the fewest requests left (`x-ratelimit-limit`, `-remaining`,
 * `-reset` in seconds); a refusal is 429 `rate_limited` with
 * `Retry-After`, naming the limit that refused it.
 */
export function rateLimitHook(options: RateLimitOptions): onRequestAsyncHookHandler {
  const windowSeconds = options.windowMs / 1000;
  return async (request: FastifyRequest, reply: FastifyReply) => {
    const rules = rulesOf(request, options.defaultMax);
    if (!rules) return;
    const { rule, current, ttl } = options.counts.take(rules);
    const refused = current > rule.max;
    reply.header('x-ratelimit-limit', rule.max);
    reply.header('x-ratelimit-remaining', refused ? 0 : rule.max - current);
    reply.header('x-ratelimit-reset', Math.ceil(ttl / 1000));
    if (!refused) return;
    const of = rule === rules[0] ? '' : ' of this API key';
    throw tooManyRequests(
      'rate_limited',
      ttl,
      (seconds) =>
        `Rate limit of ${rule.max} requests per ${windowSeconds} s${of} exceeded; retry in ${seconds} s`,
    );
  };
}

/**
 * The limits a request counts against, its tenant's first: the tenant's
 * own limit (its plan) or RATE_LIMIT_MAX, read with each request from the
 * principal (cached, dropped on every replica when the tenant changes) or
 * for a stream token from its tenant, so a change applies to the next
 * request; then its API key's own, if it has one. None for a request
 * authenticated neither way, which no /v1 route lets through.
 */
function rulesOf(
  request: FastifyRequest,
  defaultMax: number,
): [RateLimitRule, ...RateLimitRule[]] | undefined {
  const { principal, streamGrant } = request;
  if (principal) {
    const tenant = {
      key: `tenant:${principal.tenant.id}`,
      max: principal.tenant.rateLimit.max ?? defaultMax,
    };
    const own = principal.key.rateLimit.max;
    return own === null ? [tenant] : [tenant, { key: `key:${principal.key.id}`, max: own }];
  }
  if (streamGrant) {
    return [
      { key: `tenant:${streamGrant.tenantId}`, max: streamGrant.rateLimit.max ?? defaultMax },
    ];
  }
  return undefined;
}
