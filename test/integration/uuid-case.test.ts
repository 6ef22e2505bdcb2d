import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { bootstrapOperator, createTenant, scriptedCatalogue } from '../support/workflows.js';

/**
 * A path id in capitals names the same resource (PostgreSQL's uuid finds it
 * either way) and is used in its lower-case form: compared with the ids the
 * store returns (the last admin key), and announced to the auth caches (a
 * revoked key, a changed tenant), which hold lower-case ids.
 */

let testApp: TestApp;
let operatorKey: string;

beforeAll(async () => {
  // The default AUTH_CACHE_TTL_MS (60 s).
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue() });
  operatorKey = await bootstrapOperator(testApp);
});
afterAll(async () => testApp?.close());

function inject(
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  url: string,
  key: string,
  payload?: object,
) {
  return testApp.app.inject({ method, url, headers: bearer(key), ...(payload ? { payload } : {}) });
}

describe('ids in capitals', () => {
  it('the last active admin key cannot be revoked, whatever the case of its id', async () => {
    const tenant = await createTenant(testApp, operatorKey, { name: 'lonely admin' });
    const me = await inject('GET', '/v1/me', tenant.key);
    const keyId = me.json().apiKey.id as string;
    const response = await inject('DELETE', `/v1/api-keys/${keyId.toUpperCase()}`, tenant.key);
    expect(response.statusCode, response.body).toBe(409);
    expect(response.json().code).toBe('last_admin_key');
  });

  it('a key revoked by its id in capitals stops working at once', async () => {
    const tenant = await createTenant(testApp, operatorKey, { name: 'revoker' });
    const issued = await inject('POST', '/v1/api-keys', tenant.key, {
      name: 'ci',
      scopes: ['member'],
    });
    expect(issued.statusCode).toBe(201);
    const { id, key } = issued.json() as { id: string; key: string };
    // Used once: now served from this replica's cache.
    expect((await inject('GET', '/v1/me', key)).statusCode).toBe(200);
    const revoked = await inject('DELETE', `/v1/api-keys/${id.toUpperCase()}`, tenant.key);
    expect(revoked.statusCode).toBe(204);
    // The store says revoked...
    const listed = await inject('GET', `/v1/api-keys/${id}`, tenant.key);
    expect(listed.json().revokedAt).not.toBeNull();
    // ...and the key must stop working at once.
    const after = await inject('GET', '/v1/me', key);
    expect(after.statusCode).toBe(401);
  });

  it('a tenant changed by its id in capitals: its cached keys see the change at once', async () => {
    const tenant = await createTenant(testApp, operatorKey, { name: 'before' });
    expect((await inject('GET', '/v1/me', tenant.key)).json().tenant.name).toBe('before');
    const patched = await inject('PATCH', `/v1/tenants/${tenant.id.toUpperCase()}`, operatorKey, {
      name: 'after',
      budget: { maxTokens: 1000 },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    const me = (await inject('GET', '/v1/me', tenant.key)).json().tenant;
    expect(me.name).toBe('after');
    expect(me.budget.maxTokens).toBe(1000);
  });
});
