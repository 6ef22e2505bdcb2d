import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import { claimExpiredLeases } from '../../src/store/workflow-leases.js';
import { customAndGenericPlans, readsOf, statementOf } from '../support/query-plans.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * Every replica's lease sweep (LEASE_RECLAIM_INTERVAL_MS, 2 s) reads the
 * workflows it takes over, not every running one: on a healthy cluster it
 * takes none, and reads none. With statistics, as the custom plan of a
 * statement run unnamed (DATABASE_URL) and as the generic plan a prepared
 * one settles on. And what it takes: lapsed leases first, oldest first,
 * then workflows without a lease past the grace.
 */

let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;
let tenantId: string;
const LIMIT = 20;
const GRACE_MS = 60_000;

beforeAll(async () => {
  setup = await createTenantDatabase();
  ({ handle, tenantId } = setup);
  // 3,000 workflows running under leases held for the next hour, among history.
  await sql`
    INSERT INTO workflows (id, tenant_id, status, mode, model, input, created_at, finished_at)
    SELECT gen_random_uuid(), ${tenantId}, 'completed', 'auto', 'scripted', 'q',
      now() - i * interval '1 minute', now() - i * interval '1 minute'
    FROM generate_series(1, 10000) AS i`.execute(handle.db);
  await running(3000, { expiresIn: '1 hour' });
  await sql`ANALYZE workflows`.execute(handle.db);
});
afterAll(async () => {
  await setup?.close();
});

/** `count` running workflows, whose lease expires `expiresIn` from now (a lapsed one: negative), or none; their ids. */
async function running(
  count: number,
  lease: { expiresIn: string } | { noneFor: string },
): Promise<string[]> {
  const leased = 'expiresIn' in lease;
  const { rows } = await sql<{ id: string }>`
    INSERT INTO workflows (id, tenant_id, status, mode, model, input, lease_owner,
      lease_expires_at, created_at, updated_at, started_at)
    SELECT gen_random_uuid(), ${tenantId}, 'running', 'auto', 'scripted', 'q',
      ${leased ? 'gone:replica' : null},
      ${leased ? sql`now() + ${lease.expiresIn}::interval + i * interval '1 second'` : null},
      now() - interval '1 day', now() - ${leased ? '0' : lease.noneFor}::interval, now()
    FROM generate_series(1, ${count}::integer) AS i
    RETURNING id`.execute(handle.db);
  return rows.map((row) => row.id);
}

function claim(owner: string) {
  return (db: Parameters<typeof claimExpiredLeases>[0]) =>
    claimExpiredLeases(db, { owner, leaseMs: 30_000, unclaimedGraceMs: GRACE_MS, limit: LIMIT });
}

/** What the sweep's plans, custom and generic, read of workflows. */
async function readsOfSweep() {
  const statement = await statementOf(handle.pool, claim('planner'));
  const { custom, generic } = await customAndGenericPlans(handle.pool, statement);
  return [readsOf(custom, 'workflows'), readsOf(generic, 'workflows')];
}

describe('the lease sweep', () => {
  it('with no lease lapsed it reads none of the running workflows', async () => {
    for (const reads of await readsOfSweep()) {
      expect(reads.indexes).not.toContain('Seq Scan');
      expect(reads.rowsRead).toBe(0);
    }
  });

  it('takes lapsed leases oldest first, then workflows without one past the grace, reading those alone', async () => {
    const lapsed = await running(LIMIT + 5, { expiresIn: '-1 hour' });
    const unleased = await running(5, { noneFor: '1 hour' });
    const fresh = await running(5, { noneFor: '0' });

    // The claim reads the rows it takes, and each once more to update it.
    for (const reads of await readsOfSweep()) {
      expect(reads.indexes).not.toContain('Seq Scan');
      expect(reads.rowsRead).toBeLessThanOrEqual(2 * LIMIT);
    }

    const first = await claim('first')(handle.db);
    expect(first.map((row) => row.id)).toEqual(lapsed.slice(0, LIMIT));
    const second = (await claim('second')(handle.db)).map((row) => row.id);
    expect(second.slice(0, 5)).toEqual(lapsed.slice(LIMIT));
    expect(second.slice(5).sort()).toEqual([...unleased].sort());
    // Those without a lease for less than the grace are left to whoever is taking them.
    expect(await claim('third')(handle.db)).toEqual([]);
    const { rows } = await sql<{ lease_owner: string | null }>`
      SELECT lease_owner FROM workflows WHERE id = ANY(${fresh}::uuid[])`.execute(handle.db);
    expect(rows).toEqual(fresh.map(() => ({ lease_owner: null })));
  });
});
