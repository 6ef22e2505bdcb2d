import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll } from 'vitest';
import { bearer, startTestApp, startTestAppOn, type TestApp } from './app.js';
import { bootstrapOperator, scriptedCatalogue } from './workflows.js';

/**
 * Two replicas on one database, on the scripted catalogue, with an
 * operator, their key caches kept for an hour: in a test of a tenant
 * change, only the change's notification can explain what replica B then
 * does. Started before the file's tests (its fields are set then) and
 * closed after them; `env` adds to (or overrides) the settings of both.
 */
export interface TwoReplicas {
  a: TestApp;
  b: TestApp;
  /** The operator tenant's admin key. */
  operatorKey: string;
  /** `GET /v1/me` with `key` on `replica`. */
  me(replica: TestApp, key: string): Promise<LightMyRequestResponse>;
  /** The operator's `PATCH /v1/tenants/:id`, on replica A. */
  patchTenant(id: string, payload: Record<string, unknown>): Promise<LightMyRequestResponse>;
}

export function useTwoReplicas(env: Record<string, string> = {}): TwoReplicas {
  // Empty until beforeAll: no test reads it before then.
  const replicas = {} as TwoReplicas;
  beforeAll(async () => {
    const settings = {
      WAYMARK_MODELS: scriptedCatalogue(),
      AUTH_CACHE_TTL_MS: '3600000',
      ...env,
    };
    const a = await startTestApp(settings);
    const b = await startTestAppOn(a.database, settings);
    const operatorKey = await bootstrapOperator(a);
    Object.assign(replicas, {
      a,
      b,
      operatorKey,
      me: (replica: TestApp, key: string) =>
        replica.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) }),
      patchTenant: (id: string, payload: Record<string, unknown>) =>
        a.app.inject({
          method: 'PATCH',
          url: `/v1/tenants/${id}`,
          headers: bearer(operatorKey),
          payload,
        }),
    } satisfies TwoReplicas);
  });
  afterAll(async () => {
    await replicas.b?.close();
    await replicas.a?.close();
  });
  return replicas;
}
