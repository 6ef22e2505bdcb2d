import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';

let testApp: TestApp;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp();
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  operatorKey = created.adminKey.secret;
});
afterAll(async () => testApp?.close());

async function createTenant(name: string) {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/tenants',
    headers: bearer(operatorKey),
    payload: { name },
  });
  expect(response.statusCode).toBe(201);
  return response.json() as { tenant: { id: string }; adminKey: { id: string; key: string } };
}

async function issueKey(adminKey: string, payload: Record<string, unknown>) {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: bearer(adminKey),
    payload,
  });
  expect(response.statusCode).toBe(201);
  return response.json() as { id: string; key: string; scopes: string[]; prefix: string };
}

describe('authentication', () => {
  it('every /v1 route without a key answers 401 problem+json with WWW-Authenticate', async () => {
    for (const [method, url] of [
      ['GET', '/v1/me'],
      ['GET', '/v1/api-keys'],
      ['POST', '/v1/api-keys'],
      ['POST', '/v1/tenants'],
      ['DELETE', `/v1/api-keys/${crypto.randomUUID()}`],
    ] as const) {
      const response = await testApp.app.inject({ method, url });
      expect(response.statusCode, `${method} ${url}`).toBe(401);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json().code).toBe('missing_api_key');
      expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
    }
  });

  it('a malformed Authorization header or an unknown key answers 401', async () => {
    const malformed = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` },
    });
    expect(malformed.statusCode).toBe(401);
    expect(malformed.json().code).toBe('invalid_authorization');
    const unknown = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(`wmk_${'A'.repeat(43)}`),
    });
    expect(unknown.statusCode).toBe(401);
    expect(unknown.json().code).toBe('invalid_api_key');
  });

  it('a valid key answers 200 and says who it is', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(operatorKey),
    });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({
      tenant: { name: 'operator', isOperator: true },
      apiKey: { scopes: ['admin'], revokedAt: null },
    });
  });
});

describe('API keys', () => {
  it('are shown once: the listing has the prefix but never the secret', async () => {
    const issued = await issueKey(operatorKey, { name: 'ci', scopes: ['member'] });
    expect(issued.key).toMatch(/^wmk_/);
    const listing = await testApp.app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(operatorKey),
    });
    expect(listing.statusCode).toBe(200);
    expect(listing.body).not.toContain(issued.key);
    const item = listing.json().items.find((key: { id: string }) => key.id === issued.id);
    expect(item).toMatchObject({ name: 'ci', prefix: issued.prefix, scopes: ['member'] });
    expect(item.key).toBeUndefined();
  });

  it('are stored only as a hash', async () => {
    const issued = await issueKey(operatorKey, { name: 'hash check' });
    const { rows } = await testApp.services.database.pool.query(
      'SELECT row_to_json(k)::text AS row FROM api_keys k WHERE id = $1',
      [issued.id],
    );
    expect(rows[0].row).not.toContain(issued.key);
    expect(rows[0].row).not.toContain(issued.key.slice(12));
  });

  it('default to the member scope', async () => {
    expect((await issueKey(operatorKey, { name: 'default scope' })).scopes).toEqual(['member']);
  });

  it('a member key gets 403 on admin routes and 200 on member routes', async () => {
    const member = await issueKey(operatorKey, { name: 'member', scopes: ['member'] });
    const denied = await testApp.app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(member.key),
    });
    expect(denied.statusCode).toBe(403);
    expect(denied.json().code).toBe('insufficient_scope');
    const me = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(member.key),
    });
    expect(me.statusCode).toBe(200);
  });

  it('a revoked key stops working at once, and revoking again succeeds', async () => {
    const issued = await issueKey(operatorKey, { name: 'to revoke' });
    const before = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(issued.key),
    });
    expect(before.statusCode).toBe(200);
    const revoke = () =>
      testApp.app.inject({
        method: 'DELETE',
        url: `/v1/api-keys/${issued.id}`,
        headers: bearer(operatorKey),
      });
    expect((await revoke()).statusCode).toBe(204);
    const after = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(issued.key),
    });
    expect(after.statusCode).toBe(401);
    expect((await revoke()).statusCode).toBe(204);
    const shown = await testApp.app.inject({
      method: 'GET',
      url: `/v1/api-keys/${issued.id}`,
      headers: bearer(operatorKey),
    });
    expect(shown.json().revokedAt).not.toBeNull();
  });

  it('the last active admin key of a tenant cannot be revoked (409), another can', async () => {
    const tenant = await createTenant('solo');
    const revokeOwn = await testApp.app.inject({
      method: 'DELETE',
      url: `/v1/api-keys/${tenant.adminKey.id}`,
      headers: bearer(tenant.adminKey.key),
    });
    expect(revokeOwn.statusCode).toBe(409);
    expect(revokeOwn.json().code).toBe('last_admin_key');
    const second = await issueKey(tenant.adminKey.key, { name: 'second admin', scopes: ['admin'] });
    const revokeFirst = await testApp.app.inject({
      method: 'DELETE',
      url: `/v1/api-keys/${tenant.adminKey.id}`,
      headers: bearer(second.key),
    });
    expect(revokeFirst.statusCode).toBe(204);
  });

  it('two concurrent revocations of the last two admin keys leave one standing', async () => {
    const tenant = await createTenant('race');
    const second = await issueKey(tenant.adminKey.key, { name: 'second admin', scopes: ['admin'] });
    const [a, b] = await Promise.all([
      testApp.services.tenancy.revokeKey(tenant.tenant.id, tenant.adminKey.id).then(
        () => 'revoked',
        (error: { code?: string }) => error.code,
      ),
      testApp.services.tenancy.revokeKey(tenant.tenant.id, second.id).then(
        () => 'revoked',
        (error: { code?: string }) => error.code,
      ),
    ]);
    expect([a, b].sort()).toEqual(['last_admin_key', 'revoked']);
    const active = (await testApp.services.tenancy.listKeys(tenant.tenant.id)).filter(
      (key) => !key.revokedAt,
    );
    expect(active).toHaveLength(1);
  });
});

describe('tenants', () => {
  it('only admins of the operator tenant may create tenants', async () => {
    const tenant = await createTenant('acme');
    const byOtherAdmin = await testApp.app.inject({
      method: 'POST',
      url: '/v1/tenants',
      headers: bearer(tenant.adminKey.key),
      payload: { name: 'sneaky' },
    });
    expect(byOtherAdmin.statusCode).toBe(403);
    expect(byOtherAdmin.json().code).toBe('operator_only');
    const member = await issueKey(operatorKey, { name: 'operator member', scopes: ['member'] });
    const byMember = await testApp.app.inject({
      method: 'POST',
      url: '/v1/tenants',
      headers: bearer(member.key),
      payload: { name: 'sneaky' },
    });
    expect(byMember.statusCode).toBe(403);
  });

  it("a key of tenant A asking for tenant B's resources gets 404", async () => {
    const a = await createTenant('tenant a');
    const b = await createTenant('tenant b');
    const keyOfB = await issueKey(b.adminKey.key, { name: 'b member' });
    for (const method of ['GET', 'DELETE'] as const) {
      const response = await testApp.app.inject({
        method,
        url: `/v1/api-keys/${keyOfB.id}`,
        headers: bearer(a.adminKey.key),
      });
      expect(response.statusCode, method).toBe(404);
      expect(response.json().code).toBe('not_found');
    }
    const stillWorks = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(keyOfB.key),
    });
    expect(stillWorks.statusCode).toBe(200);
    const listingOfA = await testApp.app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(a.adminKey.key),
    });
    expect(listingOfA.json().items.map((key: { id: string }) => key.id)).toEqual([a.adminKey.id]);
  });
});

describe('bootstrap', () => {
  it('creates nothing once a tenant exists', async () => {
    expect(await testApp.services.tenancy.bootstrap()).toBeUndefined();
  });
});
