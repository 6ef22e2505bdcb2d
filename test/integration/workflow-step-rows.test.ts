import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// workflow_events and workflow_turns carry no foreign key to workflows
// (migration 0011); a trigger deletes them with their workflow instead.
let database: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  database = await createTestDatabase();
  pool = new pg.Pool({ connectionString: database.url, max: 2 });
});
afterAll(async () => {
  await pool?.end();
  await database?.drop();
});

async function newTenant(): Promise<string> {
  const id = randomUUID();
  await pool.query('INSERT INTO tenants (id, name) VALUES ($1, $2)', [id, `tenant ${id}`]);
  return id;
}

/** A finished workflow with three events and two turns; returns its id. */
async function workflowWithSteps(tenantId: string): Promise<string> {
  const id = randomUUID();
  await pool.query(
    `INSERT INTO workflows (id, tenant_id, status, mode, model, input, last_seq, finished_at)
     VALUES ($1, $2, 'completed', 'auto', 'scripted', 'question', 3, now())`,
    [id, tenantId],
  );
  await pool.query(
    `INSERT INTO workflow_events (workflow_id, seq, tenant_id, type, status)
     SELECT $1, seq, $2, 'warning', 'info' FROM generate_series(1, 3) AS seq`,
    [id, tenantId],
  );
  await pool.query(
    `INSERT INTO workflow_turns (workflow_id, tenant_id, turn, state)
     SELECT $1, $2, turn, '{"schemaVersion": 1}' FROM generate_series(1, 2) AS turn`,
    [id, tenantId],
  );
  return id;
}

/** [events, turns] of each workflow, in the order given. */
async function stepRows(ids: string[]): Promise<Array<[number, number]>> {
  const { rows } = await pool.query<{ id: string; events: number; turns: number }>(
    `SELECT w.id,
            (SELECT count(*)::int FROM workflow_events e WHERE e.workflow_id = w.id) AS events,
            (SELECT count(*)::int FROM workflow_turns t WHERE t.workflow_id = w.id) AS turns
     FROM unnest($1::uuid[]) AS w(id)`,
    [ids],
  );
  const byId = new Map(rows.map((row) => [row.id, [row.events, row.turns] as [number, number]]));
  return ids.map((id) => byId.get(id) ?? [-1, -1]);
}

describe('a workflow’s events and turns', () => {
  it('are deleted with their workflow, and no other workflow’s are', async () => {
    const tenantId = await newTenant();
    const [gone, alsoGone, kept] = [
      await workflowWithSteps(tenantId),
      await workflowWithSteps(tenantId),
      await workflowWithSteps(tenantId),
    ];

    await pool.query('DELETE FROM workflows WHERE id = ANY($1::uuid[])', [[gone, alsoGone]]);

    expect(await stepRows([gone, alsoGone, kept])).toEqual([
      [0, 0],
      [0, 0],
      [3, 2],
    ]);
  });

  it('are deleted when their tenant is, through its cascade to the workflows', async () => {
    const [doomed, other] = [await newTenant(), await newTenant()];
    const ids = [await workflowWithSteps(doomed), await workflowWithSteps(doomed)];
    const kept = await workflowWithSteps(other);

    await pool.query('DELETE FROM tenants WHERE id = $1', [doomed]);

    expect(await stepRows([...ids, kept])).toEqual([
      [0, 0],
      [0, 0],
      [3, 2],
    ]);
  });
});
