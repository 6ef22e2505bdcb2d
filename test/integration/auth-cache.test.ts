import { afterAll, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { createTenant } from '../support/workflows.js';

/**
 * API-key authentication served from each replica's memory, with
 * revocations and tenant changes reaching every replica at once. Two
 * replicas on one database, each with its own hub; their TTL is an hour,
 * so only a notification can explain a change seen on the other replica.
 */

const AN_HOUR = '3600000';
/** The rate limit counted on each replica alone: its sync (a statement a second) would pass for the request's. */
const SETTINGS = { AUTH_CACHE_TTL_MS: AN_HOUR, RATE_LIMIT_SYNC_MS: '0' };

let replicaA: TestApp;
let replicaB: TestApp;
let operatorKey: string;

beforeAll(async () => {
  replicaA = await startTestApp(SETTINGS);
  replicaB = await startTestAppOn(replicaA.database, SETTINGS);
  const created = await replicaA.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  operatorKey = created.adminKey.secret;
});

afterAll(async () => {
  await replicaB?.close();
  await replicaA?.close();
});

function me(replica: TestApp, key: string) {
  return replica.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
}

/** A new key of the tenant `adminKey` administers, issued on replica A. */
async function issueKey(adminKey = operatorKey): Promise<{ id: string; key: string }> {
  const response = await replicaA.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: bearer(adminKey),
    payload: { name: `key ${Math.random()}`, scopes: ['member'] },
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json();
}

async function revoke(replica: TestApp, id: string): Promise<void> {
  const response = await replica.app.inject({
    method: 'DELETE',
    url: `/v1/api-keys/${id}`,
    headers: bearer(operatorKey),
  });
  expect(response.statusCode, response.body).toBe(204);
}

/**
 * Counts the connections a replica checks out of its pool: kysely takes
 * one for every statement outside a transaction, so a request that sends
 * none checks out none. The first and the TTL tests see uncached requests
 * counted, so the spy is known to see queries.
 */
function countQueries(replica: TestApp): MockInstance {
  return vi.spyOn(replica.services.database.pool, 'connect');
}

/** Authenticates `key` on `replica` so that it is cached there, and proves it: the next request sends no query. */
async function cacheOn(replica: TestApp, key: string): Promise<void> {
  expect((await me(replica, key)).statusCode).toBe(200);
  const queries = countQueries(replica);
  try {
    expect((await me(replica, key)).statusCode).toBe(200);
    expect(queries).not.toHaveBeenCalled();
  } finally {
    queries.mockRestore();
  }
}

describe('API-key cache', () => {
  it('a cached key is served without a query', async () => {
    const { key } = await issueKey();
    const queries = countQueries(replicaB);
    try {
      expect((await me(replicaB, key)).statusCode).toBe(200);
      expect(queries.mock.calls.length).toBeGreaterThan(0);
      queries.mockClear();
      expect((await me(replicaB, key)).statusCode).toBe(200);
      expect(queries).not.toHaveBeenCalled();
    } finally {
      queries.mockRestore();
    }
    expect(replicaB.services.principalCache.size()).toBeGreaterThan(0);
  });

  it('revoking a key on a replica: its very next request there gets 401', async () => {
    const { id, key } = await issueKey();
    await cacheOn(replicaA, key);
    await revoke(replicaA, id);
    const response = await me(replicaA, key);
    expect(response.statusCode).toBe(401);
    expect(response.json().code).toBe('invalid_api_key');
  });

  it('revoking a key on replica A: replica B, which had it cached, answers 401 shortly after', async () => {
    const { id, key } = await issueKey();
    await cacheOn(replicaB, key);
    await revoke(replicaA, id);
    await expect
      .poll(async () => (await me(replicaB, key)).statusCode, { timeout: 5_000, interval: 20 })
      .toBe(401);
  });

  it('a tenant updated on replica A: every key of it cached on either replica sees the change', async () => {
    const tenant = await createTenant(replicaA, operatorKey, {
      name: 'cached tenant',
      budget: { maxIterations: 5 },
    });
    const member = await issueKey(tenant.key);
    for (const key of [tenant.key, member.key]) {
      await cacheOn(replicaA, key);
      await cacheOn(replicaB, key);
    }
    const patched = await replicaA.app.inject({
      method: 'PATCH',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(operatorKey),
      payload: { budget: { maxIterations: 7 } },
    });
    expect(patched.statusCode, patched.body).toBe(200);

    for (const key of [tenant.key, member.key]) {
      expect((await me(replicaA, key)).json().tenant.budget.maxIterations).toBe(7);
      await expect
        .poll(async () => (await me(replicaB, key)).json().tenant.budget.maxIterations, {
          timeout: 5_000,
          interval: 20,
        })
        .toBe(7);
    }
  });

  it('after the listening connection drops and reconnects, the cache is empty', async () => {
    const { key } = await issueKey();
    await cacheOn(replicaB, key);
    expect(replicaB.services.principalCache.size()).toBeGreaterThan(0);

    const hub = replicaB.services.hub;
    const pid = hub.listenerPid();
    expect(pid).toBeTypeOf('number');
    await replicaA.services.database.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await expect
      .poll(() => hub.isListening() && hub.listenerPid() !== pid, { timeout: 10_000 })
      .toBe(true);

    expect(replicaB.services.principalCache.size()).toBe(0);
    // And it caches again now that invalidations arrive.
    await cacheOn(replicaB, key);
  });

  it('with AUTH_CACHE_TTL_MS=0 every request reads the key from the store', async () => {
    const uncached = await startTestAppOn(replicaA.database, {
      ...SETTINGS,
      AUTH_CACHE_TTL_MS: '0',
    });
    try {
      const { key } = await issueKey();
      const queries = countQueries(uncached);
      for (let i = 0; i < 3; i++) {
        queries.mockClear();
        expect((await me(uncached, key)).statusCode).toBe(200);
        expect(queries.mock.calls.length).toBeGreaterThan(0);
      }
      expect(uncached.services.principalCache.size()).toBe(0);
    } finally {
      await uncached.close();
    }
  });

  it('an expired entry is read again from the store', async () => {
    const shortLived = await startTestAppOn(replicaA.database, {
      ...SETTINGS,
      AUTH_CACHE_TTL_MS: '1000',
    });
    try {
      const { key } = await issueKey();
      await cacheOn(shortLived, key);
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const queries = countQueries(shortLived);
      expect((await me(shortLived, key)).statusCode).toBe(200);
      expect(queries.mock.calls.length).toBeGreaterThan(0);
      queries.mockRestore();
    } finally {
      await shortLived.close();
    }
  });
});
