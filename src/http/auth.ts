import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { type AppError, forbidden, tooManyRequests, unauthorized } from '../errors.js';
import type { WaymarkMetrics } from '../metrics/waymark-metrics.js';
import type { TenancyService } from '../tenancy/service.js';
import type { StreamGrant, StreamTokens } from '../tenancy/stream-tokens.js';
import { hasScope, type Principal, type Scope, type TenantRateLimit } from '../tenancy/types.js';
import type { AuthFailures } from './auth-failures.js';

/** A stream token's grant, with its tenant's rate limit as read when the request came. */
export interface StreamAccess extends StreamGrant {
  rateLimit: TenantRateLimit;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on every /v1 request; absent elsewhere. */
    principal: Principal | null;
    /** Set instead of `principal` when a route accepting stream tokens was called with `?token=`. */
    streamGrant: StreamAccess | null;
  }
  interface FastifyContextConfig {
    /** Scope a route needs; `member` when unset. */
    scope?: Scope;
    /** Only admins of the operator tenant may call the route. */
    operatorOnly?: boolean;
    /**
     * The route also accepts a stream token in `?token=` (browsers' EventSource
     * cannot send headers). The token must name the workflow in the route's `:id`.
     */
    streamToken?: boolean;
  }
}

export interface BearerAuthOptions {
  tenancy: TenancyService;
  streamTokens: StreamTokens;
  /** The app's one count of failed authentications per client address (shared by every scope). */
  failures: AuthFailures;
  metrics: Pick<WaymarkMetrics, 'observeKeyLookup'>;
}

/**
 * Bearer-key authentication for every route registered in the same scope
 * (the /v1 plugin). Runs at onRequest, before the body is read, so an
 * unauthenticated client cannot make the server parse a large body.
 * Routes flagged `streamToken` also accept a stream token in `?token=`
 * when no Authorization header is sent.
 */
export const bearerAuth = fp(
  async (app: FastifyInstance, options: BearerAuthOptions) => {
    app.decorateRequest('principal', null);
    app.decorateRequest('streamGrant', null);
    app.addHook('onRoute', (route) => {
      const security: Record<string, string[]>[] = route.config?.streamToken
        ? [{ bearerAuth: [] }, { streamToken: [] }]
        : [{ bearerAuth: [] }];
      route.schema = { ...route.schema, security };
    });
    app.addHook('onRequest', async (request) => {
      if (request.routeOptions.config.streamToken && !request.headers.authorization) {
        const token = (request.query as { token?: unknown }).token;
        if (token !== undefined) {
          const grant = await verifyStreamToken(options.streamTokens, request, token);
          const tenant = await options.tenancy.streamTenantOf(grant.tenantId);
          if (tenant.refused) throw tenantSuspended();
          request.streamGrant = { ...grant, rateLimit: tenant.rateLimit };
          return;
        }
      }
      const principal = await authenticateKey(request, options);
      const expiresAt = principal.key.expiresAt;
      if (expiresAt && expiresAt.getTime() <= Date.now()) {
        throw unauthorized('api_key_expired', `The API key expired at ${expiresAt.toISOString()}`);
      }
      if (principal.tenant.suspendedAt) throw tenantSuspended();
      request.principal = principal;
      const config = request.routeOptions.config;
      const scope = config.scope ?? 'member';
      if (!hasScope(principal, scope)) {
        throw forbidden('insufficient_scope', `This API key lacks the "${scope}" scope`);
      }
      if (config.operatorOnly && !principal.tenant.isOperator) {
        throw forbidden('operator_only', 'Only the operator tenant may do this');
      }
    });
  },
  { name: 'waymark-bearer-auth' },
);

/**
 * The principal of the request's API key (401 when unknown or revoked). A
 * key not in memory is read from the store, unless the client's address
 * has spent its failed authentications (auth-failures.ts) and this replica
 * has not found the key active before: then 429, without the query. Known
 * keys are still read, so the working clients behind an address a broken
 * one shares (a NAT, a proxy without TRUST_PROXY) are not locked out.
 */
async function authenticateKey(
  request: FastifyRequest,
  options: BearerAuthOptions,
): Promise<Principal> {
  const secret = bearerToken(request);
  let queried = false;
  const principal = await options.tenancy.authenticate(secret, {
    beforeQuery: (key) => {
      const retryAfterMs = key.known ? undefined : options.failures.retryAfterMs(request.ip);
      if (retryAfterMs !== undefined) {
        options.metrics.observeKeyLookup('refused');
        throw authFailuresExceeded(retryAfterMs);
      }
      queried = true;
    },
  });
  if (queried) options.metrics.observeKeyLookup(principal ? 'found' : 'unknown');
  if (principal) return principal;
  if (queried && options.failures.record(request.ip)) {
    request.log.warn(
      { remoteAddress: request.ip },
      'a client address spent its failed authentications (AUTH_FAILURE_LIMIT): keys this replica has not found before are refused until its window ends',
    );
  }
  throw unauthorized('invalid_api_key', 'The API key is unknown or revoked');
}

function authFailuresExceeded(retryAfterMs: number): AppError {
  return tooManyRequests(
    'auth_failures_exceeded',
    retryAfterMs,
    (seconds) => `Too many unknown or revoked API keys from this address; retry in ${seconds} s`,
  );
}

/** 403 for every key and stream token of a tenant the operator has suspended. */
function tenantSuspended() {
  return forbidden(
    'tenant_suspended',
    'The tenant is suspended: its API keys and stream tokens are refused until the operator lifts it',
  );
}

async function verifyStreamToken(
  streamTokens: StreamTokens,
  request: FastifyRequest,
  token: unknown,
): Promise<StreamGrant> {
  // `?token=a&token=b` parses to an array: not a token.
  if (typeof token !== 'string') {
    throw unauthorized('invalid_stream_token', 'The stream token is not valid');
  }
  const grant = await streamTokens.verify(token);
  // The path's id as sent (it is validated, and lower-cased, after this hook).
  const id = (request.params as { id?: unknown }).id;
  if (typeof id !== 'string' || grant.workflowId !== id.toLowerCase()) {
    throw unauthorized('stream_token_scope', 'The stream token is for another workflow');
  }
  return grant;
}

function bearerToken(request: FastifyRequest): string {
  const header = request.headers.authorization;
  if (!header) {
    throw unauthorized('missing_api_key', 'Send an API key as "Authorization: Bearer <key>"');
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match?.[1]) {
    throw unauthorized('invalid_authorization', 'The Authorization header must be "Bearer <key>"');
  }
  return match[1];
}

/** The tenant an authenticated request acts for: its API key's, or its stream token's. */
export function tenantIdOf(request: FastifyRequest): string {
  const tenantId = request.principal?.tenant.id ?? request.streamGrant?.tenantId;
  if (!tenantId) throw new Error('tenantIdOf called on a route without bearer auth');
  return tenantId;
}

/** The principal of an authenticated request; only for routes behind bearerAuth. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error('principalOf called on a route without bearer auth');
  return request.principal;
}
