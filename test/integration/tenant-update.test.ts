import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  type TestTenant,
} from '../support/workflows.js';

/** PATCH /v1/tenants/:id: operator admins change a tenant's name, models and budget overrides. */

let testApp: TestApp;
let operatorKey: string;
let tenant: TestTenant;

beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue() });
  operatorKey = await bootstrapOperator(testApp);
  tenant = await createTenant(testApp, operatorKey, {
    name: 'acme',
    budget: { maxIterations: 20, maxTokens: 5000 },
  });
});
afterAll(async () => testApp?.close());

function patchTenant(id: string, payload: Record<string, unknown>, key = operatorKey) {
  return testApp.app.inject({
    method: 'PATCH',
    url: `/v1/tenants/${id}`,
    headers: bearer(key),
    payload,
  });
}

async function me(key: string) {
  const response = await testApp.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
  expect(response.statusCode).toBe(200);
  return response.json().tenant as Record<string, unknown>;
}

describe('PATCH /v1/tenants/:id', () => {
  it('a tenant created with overrides shows them; the others are null (the defaults)', async () => {
    expect((await me(tenant.key)).budget).toEqual({
      maxIterations: 20,
      maxTokens: 5000,
      maxCostUsd: null,
    });
  });

  it('changes only the fields sent; null returns a cap to the default', async () => {
    const response = await patchTenant(tenant.id, {
      budget: { maxCostUsd: 0.25, maxTokens: null },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({
      id: tenant.id,
      name: 'acme',
      budget: { maxIterations: 20, maxTokens: null, maxCostUsd: 0.25 },
    });
    // The tenant's keys see the change at once.
    expect((await me(tenant.key)).budget).toEqual(response.json().budget);
  });

  it('renames and sets models, checked against the catalogue as a whole', async () => {
    const renamed = await patchTenant(tenant.id, {
      name: 'acme corp',
      allowedModels: ['scripted'],
      defaultModel: 'scripted',
    });
    expect(renamed.statusCode, renamed.body).toBe(200);
    expect(renamed.json()).toMatchObject({
      name: 'acme corp',
      defaultModel: 'scripted',
      allowedModels: ['scripted'],
    });
    // The stored allowedModels exclude it, though this request does not name them.
    const outside = await patchTenant(tenant.id, { defaultModel: 'slow' });
    expect(outside.statusCode).toBe(400);
    expect(outside.json().errors).toEqual([
      { field: 'body.defaultModel', message: 'must be one of allowedModels' },
    ]);
    const cleared = await patchTenant(tenant.id, { allowedModels: null, defaultModel: null });
    expect(cleared.json()).toMatchObject({ defaultModel: null, allowedModels: null });
  });

  it('refuses caps out of range and unknown fields with 400', async () => {
    for (const payload of [
      { budget: { maxIterations: 0 } },
      { budget: { maxIterations: 101 } },
      { budget: { maxTokens: 1.5 } },
      { budget: { maxCostUsd: 0 } },
      { budget: { maxSteps: 3 } },
      { isOperator: true },
    ]) {
      const response = await patchTenant(tenant.id, payload);
      expect(response.statusCode, JSON.stringify(payload)).toBe(400);
    }
    expect((await me(tenant.key)).budget).toMatchObject({ maxIterations: 20 });
  });

  it('is for admins of the operator tenant only: another tenant’s admin gets 403', async () => {
    const response = await patchTenant(tenant.id, { budget: { maxIterations: 100 } }, tenant.key);
    expect(response.statusCode).toBe(403);
    expect((await me(tenant.key)).budget).toMatchObject({ maxIterations: 20 });
  });

  it('an unknown tenant is 404', async () => {
    const response = await patchTenant(crypto.randomUUID(), { name: 'ghost' });
    expect(response.statusCode).toBe(404);
    expect(response.json().code).toBe('not_found');
  });
});
