import { randomUUID } from 'node:crypto';
import { type CompiledQuery, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import type { ListPosition } from '../../src/store/list-position.js';
import { type ListFilter, workflowsRepository } from '../../src/store/workflows.js';
import { customAndGenericPlans, readsOf, statementOf } from '../support/query-plans.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * GET /v1/workflows?status= for open work (queued, running,
 * awaiting_input) reads the tenant's open workflows in order, never its
 * history (migration 0021), once ANALYZE has run: as the custom plan of
 * a statement run unnamed (DATABASE_URL) and as the generic plan a
 * prepared one settles on.
 */

let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;
let tenantId: string;

/**
 * A page's size, and the most rows its read may take: its own, and those
 * of the other status of its index between them.
 */
const LIMIT = 21;
const MOST_READ = 3 * LIMIT;

beforeAll(async () => {
  setup = await createTenantDatabase();
  ({ handle, tenantId } = setup);
  const other = randomUUID();
  await sql`INSERT INTO tenants (id, name) VALUES (${other}, 'other')`.execute(handle.db);
  // Each tenant's history: finished workflows over the last months, a paused one in 150
  // among them; then its queued and running ones, newest, alternating. The other tenant runs
  // as many as this one, whose history is most of the table's. Fewer rows than ANALYZE
  // samples (30,000), so that the statistics, and the plans, are the same at every run.
  const [history, otherHistory, open] = [15_000, 5_000, 300];
  await sql`
    INSERT INTO workflows (id, tenant_id, status, awaiting_reason, mode, model, input,
      created_at, finished_at)
    SELECT gen_random_uuid(), tenant, status,
      CASE WHEN status = 'awaiting_input' THEN 'clarification' END, 'auto', 'scripted', 'q', at,
      CASE WHEN status <> 'awaiting_input' THEN at + interval '20 seconds' END
    FROM (VALUES (${tenantId}::uuid, ${history}::integer), (${other}::uuid, ${otherHistory}::integer))
      AS t (tenant, count),
      LATERAL generate_series(1, count) AS i,
      LATERAL (SELECT now() - interval '1 hour' - i * interval '5 minutes' AS at,
        CASE WHEN i % 150 = 0 THEN 'awaiting_input'
          WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END AS status) AS s`.execute(handle.db);
  await sql`
    INSERT INTO workflows (id, tenant_id, status, mode, model, input, created_at, started_at)
    SELECT gen_random_uuid(), tenant, status, 'auto', 'scripted', 'q',
      now() - i * interval '1 second', CASE WHEN status = 'running' THEN now() END
    FROM unnest(${[tenantId, other]}::uuid[]) AS tenant, generate_series(1, ${open}::integer) AS i,
      LATERAL (SELECT CASE WHEN i % 2 = 0 THEN 'running' ELSE 'queued' END AS status) AS s`.execute(
    handle.db,
  );
  await sql`ANALYZE workflows`.execute(handle.db);
});
afterAll(async () => {
  await setup?.close();
});

/** The listing's statement as the repository makes it. */
function listing(filter: ListFilter): Promise<CompiledQuery> {
  return statementOf(handle.pool, (db) => workflowsRepository(db).list(tenantId, filter));
}

/** What the listing's plans, custom and generic, read of workflows. */
async function readsOfListing(statement: CompiledQuery) {
  const { custom, generic } = await customAndGenericPlans(handle.pool, statement);
  return [readsOf(custom, 'workflows'), readsOf(generic, 'workflows')];
}

/** Where a page after every workflow of `status` starts: after the oldest of them. */
async function afterTheLast(status: string): Promise<ListPosition> {
  const all = await workflowsRepository(handle.db).list(tenantId, { status, limit: 1000 });
  const last = all.at(-1);
  if (!last) throw new Error(`no ${status} workflow`);
  return { order: 'created', atUs: last.position_us, id: last.id };
}

describe('listing open workflows by status', () => {
  for (const [status, index] of [
    ['running', 'workflows_tenant_leasable'],
    ['queued', 'workflows_tenant_leasable'],
    ['awaiting_input', 'workflows_tenant_paused'],
  ] as const) {
    it(`a page of ${status} reads its rows in order through ${index}, and stops`, async () => {
      const statement = await listing({ status, limit: LIMIT });
      for (const plan of await readsOfListing(statement)) {
        expect(plan.indexes).toEqual([index]);
        expect(plan.rowsRead).toBeLessThanOrEqual(MOST_READ);
      }
    });

    it(`the page after the last ${status} workflow reads no history`, async () => {
      const after = await afterTheLast(status);
      const statement = await listing({ status, limit: LIMIT, after });
      for (const plan of await readsOfListing(statement)) {
        expect(plan.indexes).toEqual([index]);
        expect(plan.rowsRead).toBeLessThanOrEqual(MOST_READ);
      }
    });
  }

  it('a status lists the same workflows in the same order as a filter of the table', async () => {
    for (const status of ['running', 'queued', 'awaiting_input', 'failed']) {
      const listed = await workflowsRepository(handle.db).list(tenantId, { status, limit: 1000 });
      const { rows } = await sql<{ id: string }>`
        SELECT id FROM workflows WHERE tenant_id = ${tenantId} AND status = ${status}
        ORDER BY created_at DESC, id DESC LIMIT 1000`.execute(handle.db);
      expect(listed.map((row) => row.id)).toEqual(rows.map((row) => row.id));
    }
  });
});
