import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { forbidden, unauthorized } from '../errors.js';
import type { TenancyService } from '../tenancy/service.js';
import { hasScope, type Principal, type Scope } from '../tenancy/types.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on every /v1 request; absent elsewhere. */
    principal: Principal | null;
  }
  interface FastifyContextConfig {
    /** Scope a route needs; `member` when unset. */
    scope?: Scope;
    /** Only admins of the operator tenant may call the route. */
    operatorOnly?: boolean;
  }
}

/**
 * Bearer-key authentication for every route registered in the same scope
 * (the /v1 plugin). Runs at onRequest, before the body is read, so an
 * unauthenticated client cannot make the server parse a large body.
 */
export const bearerAuth = fp(
  async (app: FastifyInstance, options: { tenancy: TenancyService }) => {
    app.decorateRequest('principal', null);
    app.addHook('onRoute', (route) => {
      route.schema = { ...route.schema, security: [{ bearerAuth: [] }] };
    });
    app.addHook('onRequest', async (request) => {
      const secret = bearerToken(request);
      const principal = await options.tenancy.authenticate(secret);
      if (!principal) throw unauthorized('invalid_api_key', 'The API key is unknown or revoked');
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

/** The principal of an authenticated request; only for routes behind bearerAuth. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error('principalOf called on a route without bearer auth');
  return request.principal;
}
