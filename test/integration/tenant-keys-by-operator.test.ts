import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import { useScriptedApp } from '../support/workflows.js';

/** `POST /v1/tenants/:id/api-keys`: an operator admin issues a key for any tenant. */

const { app, newTenant, operatorKey } = useScriptedApp();

function issue(key: string, tenantId: string, payload: Record<string, unknown>) {
  return app().app.inject({
    method: 'POST',
    url: `/v1/tenants/${tenantId}/api-keys`,
    headers: bearer(key),
    payload,
  });
}

function me(key: string) {
  return app().app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
}

describe('an operator issuing a key for a tenant', () => {
  it('gets the tenant’s new key, shown once, which then acts for that tenant with its scopes', async () => {
    const operator = operatorKey();
    const tenant = await newTenant('keys-by-operator');
    const response = await issue(operator, tenant.id, {
      name: 'recovered admin',
      scopes: ['admin'],
    });
    expect(response.statusCode, response.body).toBe(201);
    const issued = response.json();
    expect(issued).toMatchObject({ name: 'recovered admin', scopes: ['admin'], revokedAt: null });
    const acting = await me(issued.key);
    expect(acting.statusCode).toBe(200);
    expect(acting.json()).toMatchObject({ tenant: { id: tenant.id }, apiKey: { id: issued.id } });
    // The tenant sees it among its keys, without its secret.
    const listed = await app().app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
    });
    const keys = listed.json().items as { id: string; key?: string }[];
    expect(keys.find((key) => key.id === issued.id)).toMatchObject({ id: issued.id });
    expect(JSON.stringify(keys)).not.toContain(issued.key);
    // A member key by default.
    const member = (await issue(operator, tenant.id, { name: 'member' })).json();
    expect(member.scopes).toEqual(['member']);
  });

  it('an unknown tenant is 404; a tenant’s admin may not (403 operator_only); nothing is issued', async () => {
    const operator = operatorKey();
    const tenant = await newTenant('keys-refused');
    const other = await newTenant('keys-other');
    expectProblem(await issue(operator, randomUUID(), { name: 'nobody' }), 404, 'not_found');
    expectProblem(await issue(tenant.key, other.id, { name: 'sneaky' }), 403, 'operator_only');
    expectProblem(await issue(tenant.key, tenant.id, { name: 'own' }), 403, 'operator_only');
    const { rows } = await app().services.database.pool.query(
      "SELECT 1 FROM api_keys WHERE name IN ('nobody', 'sneaky', 'own')",
    );
    expect(rows).toEqual([]);
  });
});
