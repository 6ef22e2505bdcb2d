import { sql } from 'kysely';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createRetentionSweeper } from '../../src/workflows/retention.js';
import { bearer } from '../support/app.js';
import { type TestTenant, useScriptedApp } from '../support/workflows.js';

/**
 * REVOKED_KEY_RETENTION_DAYS (default 90): the retention sweep deletes API
 * keys revoked longer ago than that; until then GET /v1/api-keys lists
 * them. Through the app's own sweep, so the setting's wiring is tested too.
 */

const { app, newTenant } = useScriptedApp();

async function issueKey(tenant: TestTenant, name: string): Promise<{ id: string; key: string }> {
  const created = await app().app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: bearer(tenant.key),
    payload: { name, scopes: ['member'] },
  });
  expect(created.statusCode, created.body).toBe(201);
  return created.json();
}

async function revoke(tenant: TestTenant, id: string): Promise<void> {
  const revoked = await app().app.inject({
    method: 'DELETE',
    url: `/v1/api-keys/${id}`,
    headers: bearer(tenant.key),
  });
  expect(revoked.statusCode, revoked.body).toBeLessThan(300);
}

async function listedNames(tenant: TestTenant): Promise<string[]> {
  const listed = await app().app.inject({
    method: 'GET',
    url: '/v1/api-keys',
    headers: bearer(tenant.key),
  });
  expect(listed.statusCode, listed.body).toBe(200);
  const body = listed.json() as { items?: { name: string }[] } | { name: string }[];
  const items = Array.isArray(body) ? body : (body.items ?? []);
  return items.map((key) => key.name).sort();
}

/** Moves a key's revocation (and creation) `days` into the past. */
async function revokedDaysAgo(id: string, days: number): Promise<void> {
  await sql`
    UPDATE api_keys SET revoked_at = now() - make_interval(days => ${days}),
      created_at = now() - make_interval(days => ${days + 1})
    WHERE id = ${id}`.execute(app().services.database.db);
}

describe('revoked API keys past their retention', () => {
  it('the sweep deletes keys revoked over 90 days ago, of every tenant; later revocations and active keys stay', async () => {
    const tenant = await newTenant('revoked keys');
    const other = await newTenant('revoked keys, other tenant');
    const old = await issueKey(tenant, 'old');
    const recent = await issueKey(tenant, 'recent');
    const active = await issueKey(tenant, 'active');
    const otherOld = await issueKey(other, 'other-old');
    for (const [owner, key] of [
      [tenant, old],
      [tenant, recent],
      [other, otherOld],
    ] as const) {
      await revoke(owner, key.id);
    }
    await revokedDaysAgo(old.id, 91);
    await revokedDaysAgo(otherOld.id, 91);
    await revokedDaysAgo(recent.id, 89);
    // Created long ago and never revoked: not the sweep's.
    await sql`UPDATE api_keys SET created_at = now() - interval '400 days' WHERE id = ${active.id}`.execute(
      app().services.database.db,
    );
    expect(await listedNames(tenant)).toEqual(['active', 'admin key', 'old', 'recent']);

    const counts = await app().services.retention.sweepOnce();
    expect(counts.apiKeys).toBe(2);

    expect(await listedNames(tenant)).toEqual(['active', 'admin key', 'recent']);
    expect(await listedNames(other)).toEqual(['admin key']);
    // Gone or revoked, the key authenticates nothing; the active one still works.
    const refused = await app().app.inject({
      method: 'GET',
      url: '/v1/workflows',
      headers: bearer(old.key),
    });
    expect(refused.statusCode).toBe(401);
    const accepted = await app().app.inject({
      method: 'GET',
      url: '/v1/workflows',
      headers: bearer(active.key),
    });
    expect(accepted.statusCode, accepted.body).toBe(200);
  });

  it('keys that expired over 90 days ago go too; one expired later, or revoked after its expiry within 90 days, stays', async () => {
    const tenant = await newTenant('expired keys');
    const expiredLongAgo = await issueKey(tenant, 'expired-long-ago');
    const expiredLately = await issueKey(tenant, 'expired-lately');
    const revokedAfterExpiry = await issueKey(tenant, 'expired-then-revoked');
    const setEnds = async (id: string, expiredDays: number, revokedDays?: number) => {
      await sql`
        UPDATE api_keys SET expires_at = now() - make_interval(days => ${expiredDays}),
          revoked_at = ${revokedDays === undefined ? null : sql`now() - make_interval(days => ${revokedDays})`},
          created_at = now() - make_interval(days => ${expiredDays + 10})
        WHERE id = ${id}`.execute(app().services.database.db);
    };
    await setEnds(expiredLongAgo.id, 91);
    await setEnds(expiredLately.id, 89);
    // Its end is its expiry, 95 days ago, not its later revocation.
    await setEnds(revokedAfterExpiry.id, 95, 10);
    const counts = await app().services.retention.sweepOnce();
    expect(counts.apiKeys).toBe(2);
    expect(await listedNames(tenant)).toEqual(['admin key', 'expired-lately']);
  });

  it('0 keeps revoked keys for good', async () => {
    const tenant = await newTenant('revoked keys kept');
    const kept = await issueKey(tenant, 'kept');
    await revoke(tenant, kept.id);
    await revokedDaysAgo(kept.id, 3650);
    const sweeper = createRetentionSweeper({
      db: app().services.database.db,
      log: pino({ level: 'silent' }),
      retentionDays: 0,
      revokedKeyRetentionDays: 0,
      intervalMs: 3_600_000,
    });
    expect((await sweeper.sweepOnce()).apiKeys).toBe(0);
    expect(await listedNames(tenant)).toEqual(['admin key', 'kept']);
  });
});
