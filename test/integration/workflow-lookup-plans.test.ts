import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * Every statement finds its workflow by (tenant_id, id). A new database's
 * tables have no statistics until autovacuum's first ANALYZE, and a
 * prepared statement planned then keeps its generic plan until the next
 * one: such a plan must still go straight to the one row, never walk an
 * index of all the tenant's workflows (migration 0010).
 */

let database: TestDatabase;
let client: pg.Client;

beforeAll(async () => {
  database = await createTestDatabase();
  client = new pg.Client({ connectionString: database.url });
  await client.connect();
  // The plan a prepared statement settles on after its first five runs.
  await client.query('SET plan_cache_mode = force_generic_plan');
});
afterAll(async () => {
  await client?.end();
  await database?.drop();
});

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

function scansOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(scansOf)].filter((one) =>
    one['Node Type'].includes('Scan'),
  );
}

/** The scans of `statement`'s generic plan on the workflows table as it is now. */
async function genericPlanScans(name: string, statement: string): Promise<PlanNode[]> {
  await client.query(`PREPARE ${name}(uuid, uuid, text[]) AS ${statement}`);
  const explained = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    `EXPLAIN (FORMAT JSON) EXECUTE ${name}(gen_random_uuid(), gen_random_uuid(), '{running}')`,
  );
  const [plan] = explained.rows[0]?.['QUERY PLAN'] ?? [];
  if (!plan) throw new Error(`no plan for ${name}`);
  return scansOf(plan.Plan);
}

describe('workflow lookups on a database without statistics', () => {
  it('a transition finds its workflow through the (tenant_id, id) index', async () => {
    const scans = await genericPlanScans(
      'transition',
      `UPDATE workflows SET version = version + 1
       WHERE id = $1 AND tenant_id = $2 AND status = ANY($3) RETURNING *`,
    );
    expect(scans).toHaveLength(1);
    expect(scans[0]).toMatchObject({
      'Node Type': 'Index Scan',
      'Index Name': 'workflows_tenant_id',
    });
    expect(scans[0]?.['Index Cond']).toMatch(/tenant_id = \$2\) AND \(id = \$1/);
  });

  it('a read of one workflow does too', async () => {
    const scans = await genericPlanScans(
      'read_one',
      'SELECT * FROM workflows WHERE id = $1 AND tenant_id = $2 AND status = ANY($3)',
    );
    expect(scans).toHaveLength(1);
    expect(scans[0]).toMatchObject({ 'Index Name': 'workflows_tenant_id' });
  });
});
