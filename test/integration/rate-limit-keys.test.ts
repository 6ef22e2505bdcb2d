import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { insertWorkflow } from '../support/event-streams.js';
import { bootstrapOperator, createTenant, scriptedCatalogue } from '../support/workflows.js';

/**
 * Rate limits are counted per tenant (README), from the request's start:
 * a request its validation refuses counts too, and a stream token's
 * requests count against the tenant whose key asked for the token, never
 * against an address that other tenants' browsers share.
 */

let testApp: TestApp;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp({
    WAYMARK_MODELS: scriptedCatalogue(),
    RATE_LIMIT_MAX: '3',
    RATE_LIMIT_WINDOW_MS: '60000',
  });
  operatorKey = await bootstrapOperator(testApp);
});
afterAll(async () => testApp?.close());

async function streamToken(key: string, workflowId: string): Promise<string> {
  const response = await testApp.app.inject({
    method: 'POST',
    url: `/v1/workflows/${workflowId}/stream-token`,
    headers: bearer(key),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json().url as string;
}

describe('rate limits', () => {
  it('requests refused by validation count against the tenant like any other', async () => {
    const tenant = await createTenant(testApp, operatorKey, { name: 'flooder' });
    // Large, invalid bodies: each is read, parsed and validated, never counted.
    const junk = { input: 'x'.repeat(500_000), mode: 'nonsense' };
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const response = await testApp.app.inject({
        method: 'POST',
        url: '/v1/workflows',
        headers: bearer(tenant.key),
        payload: junk,
      });
      statuses.push(response.statusCode);
    }
    // RATE_LIMIT_MAX is 3: the 4th request onwards must be 429.
    expect(statuses.slice(3)).toEqual([429, 429, 429, 429, 429]);
  });

  it('a stream token’s requests count against its tenant, not the address', async () => {
    const a = await createTenant(testApp, operatorKey, { name: 'tenant a' });
    const b = await createTenant(testApp, operatorKey, { name: 'tenant b' });
    const urlA = await streamToken(a.key, await insertWorkflow(testApp, a.id, 'completed'));
    const urlB = await streamToken(b.key, await insertWorkflow(testApp, b.id, 'completed'));
    // Tenant A's page opens (and reopens) its stream: the token request and two opens make 3.
    const opens: number[] = [];
    for (let i = 0; i < 3; i++) {
      opens.push((await testApp.app.inject({ method: 'GET', url: urlA })).statusCode);
    }
    expect(opens).toEqual([204, 204, 429]);
    // Tenant A is at its limit, whichever of its keys asks: the one that asked for the
    // token, and another (issued outside the API, so it spends none of A's budget)...
    const other = await testApp.services.tenancy.issueKey(a.id, {
      name: 'other',
      scopes: ['member'],
    });
    for (const key of [a.key, other.secret]) {
      const me = await testApp.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
      expect(me.statusCode).toBe(429);
    }
    // ...while tenant B's page, from the same address (a NAT, or every client behind the
    // load balancer without TRUST_PROXY), opens its stream.
    const first = await testApp.app.inject({ method: 'GET', url: urlB });
    expect(first.statusCode, first.body).toBe(204);
  });
});
