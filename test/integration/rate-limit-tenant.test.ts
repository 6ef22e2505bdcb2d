import { describe, expect, it } from 'vitest';
import { bearer, type TestApp } from '../support/app.js';
import { completedStreamUrl } from '../support/event-streams.js';
import { expectProblem } from '../support/problems.js';
import { useTwoReplicas } from '../support/two-replicas.js';
import { createTenant } from '../support/workflows.js';

/**
 * A tenant's own rate limit (`rateLimit.max`, README "Rate limits"), set by
 * the operator, in place of RATE_LIMIT_MAX. Two replicas on one database,
 * their key caches kept for an hour: only the tenant change's notification
 * can explain a new limit seen on replica B.
 */

/** Above every test's operator calls (creates, PATCHes), which spend the operator tenant's limit. */
const DEFAULT_LIMIT = 40;

const r = useTwoReplicas({
  RATE_LIMIT_MAX: String(DEFAULT_LIMIT),
  RATE_LIMIT_WINDOW_MS: '60000',
});

/** `count` requests of `key` on `replica`, by status. */
async function statuses(replica: TestApp, key: string, count: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await r.me(replica, key)).statusCode);
  return seen;
}

/** Waits until replica B has heard of a tenant change and dropped the principals it cached. */
async function heardOnB(): Promise<void> {
  await expect
    .poll(() => r.b.services.principalCache.size(), { timeout: 5_000, interval: 20 })
    .toBe(0);
}

describe('a tenant’s own rate limit', () => {
  it('a tenant limited to 3 gets 429 on its 4th request, naming its limit; another keeps the default', async () => {
    const limited = await createTenant(r.a, r.operatorKey, {
      name: 'small plan',
      rateLimit: { max: 3 },
    });
    const other = await createTenant(r.a, r.operatorKey, { name: 'default plan' });

    const first = await r.me(r.a, limited.key);
    expect(first.json().tenant.rateLimit).toEqual({ max: 3 });
    expect(first.headers['x-ratelimit-limit']).toBe('3');
    expect(await statuses(r.a, limited.key, 2)).toEqual([200, 200]);
    const refused = await r.me(r.a, limited.key);
    const problem = expectProblem(refused, 429, 'rate_limited');
    expect(problem.detail).toMatch(/^Rate limit of 3 requests per 60 s exceeded; retry in \d+ s$/);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    // Until enough of the 3 has slid out of the last 60 s: at most two windows.
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(120);

    const unlimited = await r.me(r.a, other.key);
    expect(unlimited.json().tenant.rateLimit).toEqual({ max: null });
    expect(unlimited.headers['x-ratelimit-limit']).toBe(String(DEFAULT_LIMIT));
    expect(await statuses(r.a, other.key, 4)).toEqual([200, 200, 200, 200]);
  });

  it('a PATCH on replica A raises, clears and lowers the limit for the next requests on replica B', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, {
      name: 'changing plan',
      rateLimit: { max: 3 },
    });
    expect(await statuses(r.b, tenant.key, 4)).toEqual([200, 200, 200, 429]);
    expect(r.b.services.principalCache.size()).toBe(1);

    const raised = await r.patchTenant(tenant.id, { rateLimit: { max: 6 } });
    expect(raised.statusCode, raised.body).toBe(200);
    expect(raised.json().rateLimit).toEqual({ max: 6 });
    await heardOnB();
    // Three counted so far (the refused 4th is not): three more, then the
    // 7th is refused, naming the new limit.
    expect(await statuses(r.b, tenant.key, 3)).toEqual([200, 200, 200]);
    const refused = await r.me(r.b, tenant.key);
    expect(expectProblem(refused, 429, 'rate_limited').detail).toMatch(/^Rate limit of 6 /);

    // Back to RATE_LIMIT_MAX, above the 6 let through.
    const cleared = await r.patchTenant(tenant.id, { rateLimit: { max: null } });
    expect(cleared.json().rateLimit).toEqual({ max: null });
    await heardOnB();
    const afterClear = await r.me(r.b, tenant.key);
    expect(afterClear.statusCode).toBe(200);
    expect(afterClear.json().tenant.rateLimit).toEqual({ max: null });
    expect(afterClear.headers['x-ratelimit-limit']).toBe(String(DEFAULT_LIMIT));
    expect(afterClear.headers['x-ratelimit-remaining']).toBe(String(DEFAULT_LIMIT - 7));

    const lowered = await r.patchTenant(tenant.id, { rateLimit: { max: 2 } });
    expect(lowered.statusCode, lowered.body).toBe(200);
    await heardOnB();
    expect(expectProblem(await r.me(r.b, tenant.key), 429, 'rate_limited').detail).toMatch(
      /^Rate limit of 2 /,
    );

    // A PATCH of other settings keeps the limit.
    const renamed = await r.patchTenant(tenant.id, { name: 'renamed plan' });
    expect(renamed.json().rateLimit).toEqual({ max: 2 });
  });

  it('a stream token’s requests count against its tenant’s own limit, above or below the default', async () => {
    const small = await createTenant(r.a, r.operatorKey, {
      name: 'small streams',
      rateLimit: { max: 3 },
    });
    const large = await createTenant(r.a, r.operatorKey, {
      name: 'large streams',
      rateLimit: { max: DEFAULT_LIMIT + 3 },
    });
    const opens = async (tenant: { id: string; key: string }, count: number) => {
      const url = await completedStreamUrl(r.a, tenant);
      const seen: number[] = [];
      for (let i = 0; i < count; i++) {
        seen.push((await r.a.app.inject({ method: 'GET', url })).statusCode);
      }
      return seen;
    };
    // The token's request and two opens spend the 3.
    expect(await opens(small, 3)).toEqual([204, 204, 429]);
    // The token's request and the opens up to its limit, past the default.
    expect(await opens(large, DEFAULT_LIMIT + 3)).toEqual([
      ...Array<number>(DEFAULT_LIMIT + 2).fill(204),
      429,
    ]);
  });

  it('a tenant’s requests to both replicas draw on one limit once they have synced', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, {
      name: 'two replicas',
      rateLimit: { max: 5 },
    });
    expect(await statuses(r.a, tenant.key, 2)).toEqual([200, 200]);
    expect(await statuses(r.b, tenant.key, 2)).toEqual([200, 200]);
    await r.a.services.rateLimitCounts.sync();
    await r.b.services.rateLimitCounts.sync();
    // B has read A's 2 beside its own: one left.
    const fifth = await r.me(r.b, tenant.key);
    expect(fifth.statusCode).toBe(200);
    expect(fifth.headers['x-ratelimit-remaining']).toBe('0');
    expect(expectProblem(await r.me(r.b, tenant.key), 429, 'rate_limited').detail).toMatch(
      /^Rate limit of 5 /,
    );
    // Once B has added its 5th, A reads B's 3 at its next sync, with nothing of its own to add.
    await r.b.services.rateLimitCounts.sync();
    await r.a.services.rateLimitCounts.sync();
    const refused = await r.me(r.a, tenant.key);
    expectProblem(refused, 429, 'rate_limited');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(120);
  });

  it('a key with its own limit gets 429 past it, naming it, while its tenant’s other keys go on; its refusals spend nothing of the tenant’s', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'keys with limits' });
    const issue = (payload: Record<string, unknown>) =>
      r.a.app.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: bearer(tenant.key),
        payload: { name: `limited ${Math.random()}`, ...payload },
      });
    const issued = await issue({ rateLimit: { max: 2 } });
    expect(issued.statusCode, issued.body).toBe(201);
    expect(issued.json().rateLimit).toEqual({ max: 2 });
    const limited: string = issued.json().key;

    const first = await r.me(r.a, limited);
    expect(first.statusCode).toBe(200);
    expect(first.json().apiKey.rateLimit).toEqual({ max: 2 });
    // The key's limit has the fewest left: the headers are its.
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    expect((await r.me(r.a, limited)).statusCode).toBe(200);
    for (let i = 0; i < 3; i++) {
      const refused = await r.me(r.a, limited);
      expect(expectProblem(refused, 429, 'rate_limited').detail).toMatch(
        /^Rate limit of 2 requests per 60 s of this API key exceeded; retry in \d+ s$/,
      );
    }
    // The tenant's admin key: the issue and the key's 2 spent, not its 3 refusals.
    const admin = await r.me(r.a, tenant.key);
    expect(admin.statusCode).toBe(200);
    expect(admin.headers['x-ratelimit-limit']).toBe(String(DEFAULT_LIMIT));
    expect(admin.headers['x-ratelimit-remaining']).toBe(String(DEFAULT_LIMIT - 4));
    // Shared like the tenant's: replica B, which had not counted the key,
    // lets one through on its own count, and learns A's at its next sync.
    await r.a.services.rateLimitCounts.sync();
    expect((await r.me(r.b, limited)).statusCode).toBe(200);
    await r.b.services.rateLimitCounts.sync();
    expectProblem(await r.me(r.b, limited), 429, 'rate_limited');

    // Listed with its limit; a key without one shows null.
    const listed = await r.a.app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
    });
    const limits = (listed.json().items as Array<{ rateLimit: unknown }>).map(
      (key) => key.rateLimit,
    );
    expect(limits).toEqual(expect.arrayContaining([{ max: 2 }, { max: null }]));
    // The operator issues one for the tenant the same way.
    const byOperator = await r.a.app.inject({
      method: 'POST',
      url: `/v1/tenants/${tenant.id}/api-keys`,
      headers: bearer(r.operatorKey),
      payload: { name: 'operator issued', rateLimit: { max: 7 } },
    });
    expect(byOperator.statusCode, byOperator.body).toBe(201);
    expect(byOperator.json().rateLimit).toEqual({ max: 7 });
    for (const rateLimit of [{ max: 0 }, { max: 1_000_001 }, { max: null }, { max: 1.5 }, {}]) {
      expectProblem(await issue({ rateLimit }), 400, 'validation_failed');
    }
  });

  it('PATCH /v1/api-keys/:id on replica A changes a key’s own limit for its next request on replica B', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'changing key limits' });
    const patchKey = (id: string, payload: unknown, adminKey = tenant.key) =>
      r.a.app.inject({
        method: 'PATCH',
        url: `/v1/api-keys/${id}`,
        headers: bearer(adminKey),
        payload: payload as Record<string, unknown>,
      });
    const issued = await r.a.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
      payload: { name: 'changing', rateLimit: { max: 2 } },
    });
    const { id, key } = issued.json() as { id: string; key: string };
    expect(await statuses(r.b, key, 3)).toEqual([200, 200, 429]);
    // B holds the key's principal among those of earlier tests: the change drops it alone.
    const keyDroppedOnB = async (change: () => Promise<unknown>) => {
      const held = r.b.services.principalCache.size();
      await change();
      await expect
        .poll(() => r.b.services.principalCache.size(), { timeout: 5_000, interval: 20 })
        .toBe(held - 1);
    };

    let raised: Awaited<ReturnType<typeof patchKey>> | undefined;
    await keyDroppedOnB(async () => {
      raised = await patchKey(id, { rateLimit: { max: 4 } });
    });
    expect(raised?.statusCode, raised?.body).toBe(200);
    expect(raised?.json()).toMatchObject({ id, name: 'changing', rateLimit: { max: 4 } });
    expect(await statuses(r.b, key, 2)).toEqual([200, 200]);
    expect(expectProblem(await r.me(r.b, key), 429, 'rate_limited').detail).toMatch(
      /^Rate limit of 4 requests per 60 s of this API key /,
    );

    // Renamed, the limit stays (B still refuses, naming it); null leaves the tenant's alone.
    await keyDroppedOnB(async () => {
      expect((await patchKey(id, { name: 'renamed' })).json()).toMatchObject({
        name: 'renamed',
        rateLimit: { max: 4 },
      });
    });
    expect(expectProblem(await r.me(r.b, key), 429, 'rate_limited').detail).toMatch(
      /^Rate limit of 4 /,
    );
    await keyDroppedOnB(async () => {
      expect((await patchKey(id, { rateLimit: { max: null } })).json().rateLimit).toEqual({
        max: null,
      });
    });
    const free = await r.me(r.b, key);
    expect(free.statusCode).toBe(200);
    expect(free.headers['x-ratelimit-limit']).toBe(String(DEFAULT_LIMIT));

    for (const payload of [
      {},
      { rateLimit: {} },
      { rateLimit: { max: 0 } },
      { scopes: ['admin'] },
    ]) {
      expectProblem(await patchKey(id, payload), 400, 'validation_failed');
    }
    // Another tenant's admin cannot reach it.
    expectProblem(await patchKey(id, { name: 'taken' }, r.operatorKey), 404, 'not_found');
  });

  it('refuses a limit that is not a whole number from 1 to 1,000,000 with 400 validation_failed', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'validated plan' });
    for (const rateLimit of [
      { max: 0 },
      { max: -1 },
      { max: 2.5 },
      { max: 1_000_001 },
      { max: '10' },
      { max: 10, window: 1000 },
      null,
    ]) {
      const label = JSON.stringify(rateLimit);
      const created = await r.a.app.inject({
        method: 'POST',
        url: '/v1/tenants',
        headers: bearer(r.operatorKey),
        payload: { name: 'refused plan', rateLimit },
      });
      expect(created.statusCode, label).toBe(400);
      expect(created.json().code, label).toBe('validation_failed');
      const patched = await r.patchTenant(tenant.id, { rateLimit });
      expect(patched.statusCode, label).toBe(400);
      const body = expectProblem(patched, 400, 'validation_failed');
      expect(JSON.stringify(body.errors ?? body), label).toMatch(/body\.rateLimit/);
    }
    const accepted = await r.patchTenant(tenant.id, { rateLimit: { max: 1_000_000 } });
    expect(accepted.json().rateLimit).toEqual({ max: 1_000_000 });
  });
});
