import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { bootstrapOperator } from '../support/workflows.js';

/**
 * The rate limit is the tenant's (README): every key of a tenant draws on
 * one budget, so a tenant cannot multiply its limit by issuing itself keys,
 * and one tenant spending its budget leaves the others theirs. Over real
 * sockets, as clients call it.
 */

const LIMIT = 4;

let testApp: TestApp;
let base: string;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp({ RATE_LIMIT_MAX: String(LIMIT), RATE_LIMIT_WINDOW_MS: '60000' });
  operatorKey = await bootstrapOperator(testApp);
  base = (await listenLocally(testApp.app)).url;
});
afterAll(async () => testApp?.close());

function call(key: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${path}`, {
    method,
    headers: {
      ...bearer(key),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** A tenant's admin key, through the operator's (one request of the operator tenant's budget). */
async function newTenant(name: string): Promise<string> {
  const response = await call(operatorKey, 'POST', '/v1/tenants', { name });
  expect(response.status, await response.clone().text()).toBe(201);
  return ((await response.json()) as { adminKey: { key: string } }).adminKey.key;
}

describe('rate limits per tenant', () => {
  it('two keys of one tenant share its limit: once spent, either key gets 429; another tenant is unaffected', async () => {
    const adminA = await newTenant('tenant a');
    const keyB = await newTenant('tenant b');
    // A's admin issues a member key through the API: the first of A's requests.
    const issued = await call(adminA, 'POST', '/v1/api-keys', { name: 'second key' });
    expect(issued.status).toBe(201);
    const memberA = ((await issued.json()) as { key: string }).key;

    const spent = [
      await call(adminA, 'GET', '/v1/me'),
      await call(memberA, 'GET', '/v1/me'),
      await call(memberA, 'GET', '/v1/me'),
    ];
    expect(spent.map((response) => response.status)).toEqual([200, 200, 200]);
    expect(spent.map((response) => response.headers.get('x-ratelimit-remaining'))).toEqual([
      '2',
      '1',
      '0',
    ]);

    // The 5th request of tenant A, whichever key sends it, and every one after.
    for (const key of [memberA, adminA]) {
      const limited = await call(key, 'GET', '/v1/me');
      expect(limited.status).toBe(429);
      expect(limited.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      const problem = (await limited.json()) as { code: string; detail: string };
      expect(problem.code).toBe('rate_limited');
      // The window, not the time left in it.
      expect(problem.detail).toMatch(
        /^Rate limit of 4 requests per 60 s exceeded; retry in \d+ s$/,
      );
    }
    // A key A issues now draws on the same spent budget: it cannot be issued at all.
    expect((await call(adminA, 'POST', '/v1/api-keys', { name: 'third key' })).status).toBe(429);

    // Tenant B's budget is its own, and so is the operator's (two tenants created so far).
    const b = await call(keyB, 'GET', '/v1/me');
    expect(b.status).toBe(200);
    expect(b.headers.get('x-ratelimit-remaining')).toBe(String(LIMIT - 1));
    expect((await call(operatorKey, 'GET', '/v1/me')).status).toBe(200);
  });

  it('does not limit the health and metrics endpoints, nor count requests refused for their key', async () => {
    // The operator tenant has spent its limit (two tenants created, one /me, and this).
    expect((await call(operatorKey, 'GET', '/v1/me')).status).toBe(200);
    expect((await call(operatorKey, 'GET', '/v1/me')).status).toBe(429);
    for (let i = 0; i < LIMIT + 2; i++) {
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      expect((await call(operatorKey, 'GET', '/metrics')).status).toBe(200);
      expect((await call('wmk_unknown', 'GET', '/v1/me')).status).toBe(401);
    }
  });
});
