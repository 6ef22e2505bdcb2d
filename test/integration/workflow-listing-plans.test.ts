import { randomUUID } from 'node:crypto';
import { type CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import type { ListPosition } from '../../src/store/list-position.js';
import type { Database } from '../../src/store/schema.js';
import { type ListFilter, workflowsRepository } from '../../src/store/workflows.js';
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
let generic: pg.Client;

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
  generic = new pg.Client({ connectionString: setup.database.url });
  await generic.connect();
  // The plan a prepared statement settles on after its first five runs.
  await generic.query('SET plan_cache_mode = force_generic_plan');
});
afterAll(async () => {
  await generic?.end();
  await setup?.close();
});

/** The listing's statement as the repository runs it, captured as it runs. */
async function listingStatement(filter: ListFilter): Promise<CompiledQuery> {
  let statement: CompiledQuery | undefined;
  const capturing = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: handle.pool }),
    log(event) {
      if (event.level === 'query') statement ??= event.query;
    },
  });
  await workflowsRepository(capturing).list(tenantId, filter);
  if (!statement) throw new Error('the listing ran no statement');
  return statement;
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/**
 * The indexes a plan read workflows through (a scan of the table by its
 * node type), and how many rows it read from the table.
 */
function readsOf(plan: PlanNode): { indexes: string[]; rowsRead: number } {
  const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
  const all = nodes(plan);
  // A bitmap heap scan names the table, its bitmap index scan the index.
  const scans = all.filter((node) => node['Relation Name'] === 'workflows');
  return {
    indexes: [
      ...all.flatMap((node) => (node['Index Name'] ? [node['Index Name']] : [])),
      ...scans.flatMap((scan) => (scan['Node Type'] === 'Seq Scan' ? ['Seq Scan'] : [])),
    ],
    rowsRead: scans.reduce(
      (sum, scan) =>
        sum + (scan['Actual Rows'] + (scan['Rows Removed by Filter'] ?? 0)) * scan['Actual Loops'],
      0,
    ),
  };
}

type Explained = [{ Plan: PlanNode }];

/** The custom plan (the statement run unnamed) and the generic one (prepared), both run. */
async function plansOf(statement: CompiledQuery) {
  const custom = await handle.pool.query<{ 'QUERY PLAN': Explained }>(
    `EXPLAIN (ANALYZE, FORMAT JSON) ${statement.sql}`,
    [...statement.parameters],
  );
  await generic.query(`PREPARE listing AS ${statement.sql}`);
  try {
    const values = statement.parameters.map((value) =>
      generic.escapeLiteral(typeof value === 'string' ? value : String(value)),
    );
    const prepared = await generic.query<{ 'QUERY PLAN': Explained }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE listing(${values.join(', ')})`,
    );
    return [custom, prepared].map((result) =>
      readsOf(result.rows[0]?.['QUERY PLAN'][0].Plan as PlanNode),
    );
  } finally {
    await generic.query('DEALLOCATE listing');
  }
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
      const statement = await listingStatement({ status, limit: LIMIT });
      for (const plan of await plansOf(statement)) {
        expect(plan.indexes).toEqual([index]);
        expect(plan.rowsRead).toBeLessThanOrEqual(MOST_READ);
      }
    });

    it(`the page after the last ${status} workflow reads no history`, async () => {
      const after = await afterTheLast(status);
      const statement = await listingStatement({ status, limit: LIMIT, after });
      for (const plan of await plansOf(statement)) {
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
