import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  type TestTenant,
} from '../support/workflows.js';

/** GET /v1/tenants/:id and GET /v1/tenants: operator admins read tenants back. */

let testApp: TestApp;
let operatorKey: string;
let operatorTenantId: string;
/** Every tenant this file created, oldest first. */
const created: TestTenant[] = [];

beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue() });
  operatorKey = await bootstrapOperator(testApp);
  operatorTenantId = (await get('/v1/me')).json().tenant.id;
});
afterAll(async () => testApp?.close());

function get(url: string, key = operatorKey) {
  return testApp.app.inject({ method: 'GET', url, headers: bearer(key) });
}

async function newTenant(name: string): Promise<TestTenant> {
  const tenant = await createTenant(testApp, operatorKey, { name });
  created.push(tenant);
  return tenant;
}

describe('GET /v1/tenants/:id', () => {
  it('answers the tenant as PATCH answered it, every setting included', async () => {
    const tenant = await newTenant('acme');
    const patched = await testApp.app.inject({
      method: 'PATCH',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(operatorKey),
      payload: {
        defaultModel: 'scripted',
        allowedModels: ['scripted', 'slow'],
        budget: { maxIterations: 7, maxTokens: 9000, maxCostUsd: 0.5 },
        rateLimit: { max: 42 },
      },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    const response = await get(`/v1/tenants/${tenant.id}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual(patched.json());
    // A uuid in capitals names the same tenant.
    expect((await get(`/v1/tenants/${tenant.id.toUpperCase()}`)).json()).toEqual(patched.json());
  });

  it('an unknown tenant is 404 not_found', async () => {
    expectProblem(await get(`/v1/tenants/${randomUUID()}`), 404, 'not_found');
  });

  it('a malformed id is 400 validation_failed on params.id', async () => {
    const body = expectProblem(await get('/v1/tenants/not-a-uuid'), 400, 'validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'params.id' })]);
  });
});

describe('operator admins only', () => {
  it('another tenant’s admin gets 403 operator_only, for its own tenant as for the list', async () => {
    const other = await newTenant('other');
    for (const url of [
      `/v1/tenants/${other.id}`,
      `/v1/tenants/${operatorTenantId}`,
      '/v1/tenants',
    ]) {
      expectProblem(await get(url, other.key), 403, 'operator_only');
    }
  });

  it('a member key of the operator tenant gets 403', async () => {
    const issued = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(operatorKey),
      payload: { name: 'operator member', scopes: ['member'] },
    });
    expect(issued.statusCode).toBe(201);
    for (const url of [`/v1/tenants/${operatorTenantId}`, '/v1/tenants']) {
      expect((await get(url, issued.json().key)).statusCode, url).toBe(403);
    }
  });
});

describe('GET /v1/tenants', () => {
  it('pages through every tenant once, newest first, with a small limit', async () => {
    for (const name of ['t1', 't2', 't3', 't4', 't5']) await newTenant(name);
    const listed: Array<{ id: string }> = [];
    const pageSizes: number[] = [];
    let cursor: string | null = null;
    do {
      const query: string = cursor === null ? '' : `&cursor=${cursor}`;
      const response = await get(`/v1/tenants?limit=2${query}`);
      expect(response.statusCode, response.body).toBe(200);
      const page = response.json() as { items: Array<{ id: string }>; nextCursor: string | null };
      listed.push(...page.items);
      pageSizes.push(page.items.length);
      cursor = page.nextCursor;
    } while (cursor !== null && pageSizes.length < 20);
    const expected = [...created.map((tenant) => tenant.id).reverse(), operatorTenantId];
    expect(listed.map((tenant) => tenant.id)).toEqual(expected);
    expect(pageSizes.slice(0, -1).every((size) => size === 2)).toBe(true);
    // An item is the tenant as GET /v1/tenants/:id answers it.
    const newest = created.at(-1)?.id;
    expect(listed[0]).toEqual((await get(`/v1/tenants/${newest}`)).json());
  });

  it('a cursor it never returned is 400 invalid_cursor; a limit out of range is 400', async () => {
    for (const cursor of [
      'bm90LWEtY3Vyc29y',
      Buffer.from('123.not-a-uuid').toString('base64url'),
      // A session list's activity cursor continues no list of tenants.
      Buffer.from(`activity.123.${randomUUID()}`).toString('base64url'),
    ]) {
      expectProblem(await get(`/v1/tenants?cursor=${cursor}`), 400, 'invalid_cursor');
    }
    for (const limit of ['0', '101']) {
      expectProblem(await get(`/v1/tenants?limit=${limit}`), 400, 'validation_failed');
    }
  });
});
