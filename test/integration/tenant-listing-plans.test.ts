import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import type { ListPosition } from '../../src/store/list-position.js';
import { tenantsRepository } from '../../src/store/tenants.js';
import { customAndGenericPlans, readsOf, statementOf } from '../support/query-plans.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * GET /v1/tenants reads a page's tenants in order through tenants_created
 * (migration 0024), however deep the page, never the whole table and a
 * sort of it: as the custom plan of a statement run unnamed (DATABASE_URL)
 * and as the generic plan a prepared one settles on.
 */

let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;

/** A page's size as the service asks for it: one more than the client's limit of 20. */
const LIMIT = 21;
/** Fewer rows than ANALYZE samples (30,000), so that the statistics, and the plans, are the same at every run. */
const TENANTS = 20_000;

beforeAll(async () => {
  setup = await createTenantDatabase();
  ({ handle } = setup);
  await sql`
    INSERT INTO tenants (id, name, created_at)
    SELECT gen_random_uuid(), 'tenant ' || i, now() - i * interval '1 minute'
    FROM generate_series(1, ${TENANTS}::integer) AS i`.execute(handle.db);
  await sql`ANALYZE tenants`.execute(handle.db);
});
afterAll(async () => {
  await setup?.close();
});

/** What the listing's plans, custom and generic, read of tenants. */
async function readsOfListing(after?: ListPosition) {
  const statement = await statementOf(handle.pool, (db) =>
    tenantsRepository(db).list({ limit: LIMIT, after }),
  );
  const { custom, generic } = await customAndGenericPlans(handle.pool, statement);
  return [readsOf(custom, 'tenants'), readsOf(generic, 'tenants')];
}

describe('listing tenants', () => {
  it('a first page reads its rows in order through tenants_created, and stops', async () => {
    for (const plan of await readsOfListing()) {
      expect(plan.indexes).toEqual(['tenants_created']);
      expect(plan.rowsRead).toBeLessThanOrEqual(LIMIT);
    }
  });

  it('a page halfway down the list reads no more', async () => {
    const rows = await tenantsRepository(handle.db).list({ limit: TENANTS / 2 });
    const last = rows.at(-1);
    if (!last) throw new Error('no tenant listed');
    for (const plan of await readsOfListing({
      order: 'created',
      atUs: last.position_us,
      id: last.id,
    })) {
      expect(plan.indexes).toEqual(['tenants_created']);
      expect(plan.rowsRead).toBeLessThanOrEqual(LIMIT);
    }
  });
});
