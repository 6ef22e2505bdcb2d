import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { apiKeysRepository } from '../../src/store/api-keys.js';
import { bearer } from '../support/app.js';
import { type TestTenant, useScriptedApp } from '../support/workflows.js';

/** An API key's `lastUsedAt`: written when it is used, at most once an hour per key. */

const { app, newTenant } = useScriptedApp();

async function keyOf(tenant: TestTenant, id: string) {
  const response = await app().app.inject({
    method: 'GET',
    url: `/v1/api-keys/${id}`,
    headers: bearer(tenant.key),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json() as { lastUsedAt: string | null };
}

function me(key: string) {
  return app().app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
}

describe('an API key’s lastUsedAt', () => {
  it('is null until the key is used, then the time of its first use; further uses within the hour write nothing', async () => {
    const tenant = await newTenant('last-used');
    const issued = await app().app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
      payload: { name: 'tracked' },
    });
    const { id, key } = issued.json() as { id: string; key: string };
    expect((await keyOf(tenant, id)).lastUsedAt).toBeNull();
    const before = Date.now();
    expect((await me(key)).statusCode).toBe(200);
    // Written beside the request, not before its answer.
    await expect
      .poll(async () => (await keyOf(tenant, id)).lastUsedAt, { timeout: 5_000 })
      .not.toBeNull();
    const first = (await keyOf(tenant, id)).lastUsedAt as string;
    expect(Date.parse(first)).toBeGreaterThanOrEqual(before - 1000);
    for (let i = 0; i < 5; i++) expect((await me(key)).statusCode).toBe(200);
    // Any write would have shown by now.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await keyOf(tenant, id)).lastUsedAt).toBe(first);
  });

  it('the statement skips a key marked within the resolution, and marks one marked before it', async () => {
    const tenant = await newTenant('last-used-statement');
    const issued = await app().app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
      payload: { name: 'marked' },
    });
    const { id } = issued.json() as { id: string };
    const { db } = app().services.database;
    await sql`UPDATE api_keys SET last_used_at = now() - interval '30 minutes' WHERE id = ${id}`.execute(
      db,
    );
    const halfAnHourAgo = (await keyOf(tenant, id)).lastUsedAt;
    await apiKeysRepository(db).markUsed(id, 3_600_000);
    expect((await keyOf(tenant, id)).lastUsedAt).toBe(halfAnHourAgo);
    await sql`UPDATE api_keys SET last_used_at = now() - interval '2 hours' WHERE id = ${id}`.execute(
      db,
    );
    await apiKeysRepository(db).markUsed(id, 3_600_000);
    const marked = (await keyOf(tenant, id)).lastUsedAt as string;
    expect(Date.now() - Date.parse(marked)).toBeLessThan(60_000);
  });
});
