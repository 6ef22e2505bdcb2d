import { randomUUID } from 'node:crypto';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import type { Database } from '../../src/store/schema.js';
import { createRetentionSweeper } from '../../src/workflows/retention.js';
import type { TestDatabase } from '../support/database.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * The sweep as an operator runs it: beside rows other sessions hold, with
 * its database out of reach for a while, and on a table large enough for
 * the planner to choose between the index and a scan.
 */

const log = pino({ level: 'silent' });
const DAY_MS = 86_400_000;
let setup: TenantDatabase | undefined;
let database: TestDatabase;
let handle: DatabaseHandle;
let tenantId: string;

beforeAll(async () => {
  setup = await createTenantDatabase({ poolMax: 4 });
  ({ database, handle, tenantId } = setup);
});
afterAll(async () => {
  await setup?.close();
});
beforeEach(async () => {
  await sql`DELETE FROM workflows`.execute(handle.db);
});

/** `count` workflows completed `days` days ago; returns their ids. */
async function completedDaysAgo(days: number, count = 1): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  const finishedAt = new Date(Date.now() - days * DAY_MS);
  await sql`
    INSERT INTO workflows (id, tenant_id, status, mode, model, input, created_at, finished_at)
    SELECT id, ${tenantId}, 'completed', 'auto', 'scripted', 'question', ${finishedAt}, ${finishedAt}
    FROM unnest(${ids}::uuid[]) AS id`.execute(handle.db);
  return ids;
}

async function remaining(): Promise<string[]> {
  const rows = await handle.db.selectFrom('workflows').select('id').execute();
  return rows.map((row) => row.id).sort();
}

describe('the retention sweep beside other sessions', () => {
  it('a workflow another transaction holds is skipped, not waited for; the next sweep deletes it', async () => {
    const [held] = await completedDaysAgo(40);
    const others = await completedDaysAgo(40, 3);
    const holder = await handle.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [held]);
      const sweep = createRetentionSweeper({
        db: handle.db,
        log,
        retentionDays: 30,
        intervalMs: 1000,
      });

      const started = Date.now();
      expect((await sweep.sweepOnce()).workflows).toBe(3);
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(await remaining()).toEqual([held]);
      expect(others).not.toContain(held);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const sweep = createRetentionSweeper({
      db: handle.db,
      log,
      retentionDays: 30,
      intervalMs: 1000,
    });
    expect((await sweep.sweepOnce()).workflows).toBe(1);
    expect(await remaining()).toEqual([]);
  });

  it('a sweep that fails with the database out of reach is logged, and the next one deletes what is due', async () => {
    const url = new URL(database.url);
    const proxy: TcpProxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
    const logged: string[] = [];
    const recording = pino(
      { level: 'error' },
      { write: (line: string) => void logged.push(JSON.parse(line).msg) },
    );
    const through = openDatabase({
      url: proxy.through(database.url),
      poolMax: 2,
      log,
    });
    const sweep = createRetentionSweeper({
      db: through.db,
      log: recording,
      retentionDays: 30,
      intervalMs: 1_000,
    });
    try {
      await completedDaysAgo(40, 2);
      await proxy.cut();
      sweep.start();
      await expect.poll(() => logged, { timeout: 10_000 }).toContain('retention sweep failed');
      expect(await remaining()).toHaveLength(2);

      await proxy.restore();
      await expect.poll(remaining, { timeout: 10_000 }).toEqual([]);
    } finally {
      await sweep.stop();
      await proxy.restore().catch(() => undefined);
      await through.close();
      await proxy.close();
    }
  });

  it('a batch cancelled by statement_timeout is run again at half the size, until the sweep gets through', async () => {
    // Each deleted row costs 10 ms, so 200 rows take 2 s where the timeout allows 1 s.
    await sql`
      CREATE FUNCTION slow_workflow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.01); RETURN OLD; END $$`.execute(handle.db);
    await sql`
      CREATE TRIGGER slow_workflow_delete BEFORE DELETE ON workflows
      FOR EACH ROW EXECUTE FUNCTION slow_workflow_delete()`.execute(handle.db);
    const warned: { batchSize?: number; msg: string }[] = [];
    const recording = pino(
      { level: 'warn' },
      { write: (line: string) => void warned.push(JSON.parse(line)) },
    );
    const timed = new pg.Pool({
      connectionString: database.url,
      max: 2,
      options: '-c statement_timeout=1000',
    });
    const sweep = createRetentionSweeper({
      db: new Kysely<Database>({ dialect: new PostgresDialect({ pool: timed }) }),
      log: recording,
      retentionDays: 30,
      intervalMs: 1_000,
    });
    try {
      await completedDaysAgo(40, 200);

      expect((await sweep.sweepOnce()).workflows).toBe(200);
      expect(await remaining()).toEqual([]);
      // 500 and 250 (both over the 200 rows due) and 125 were cancelled at least.
      expect(warned.map((line) => line.batchSize).slice(0, 3)).toEqual([250, 125, 63]);
      expect(warned[0]?.msg).toMatch(/statement_timeout/);
    } finally {
      await timed.end();
      await sql`DROP TRIGGER slow_workflow_delete ON workflows`.execute(handle.db);
      await sql`DROP FUNCTION slow_workflow_delete()`.execute(handle.db);
    }
  });
});

describe('the retention sweep’s plan', () => {
  it('finds a batch through the finished_at index and deletes it by primary key, with statistics', async () => {
    // 100,000 workflows, a fifth of them unfinished, finished over 100 days.
    await sql`
      INSERT INTO workflows (id, tenant_id, status, awaiting_reason, mode, model, input, created_at, finished_at)
      SELECT gen_random_uuid(), ${tenantId}, status,
             CASE WHEN status = 'awaiting_input' THEN 'checkpoint' END, 'auto', 'scripted', 'q',
             now() - (i % 100) * interval '1 day',
             CASE WHEN status <> 'awaiting_input' THEN now() - (i % 100) * interval '1 day' END
      FROM generate_series(1, 100000) AS i,
           LATERAL (SELECT (ARRAY['completed', 'failed', 'cancelled', 'awaiting_input'])[1 + i % 4] AS status) AS s`.execute(
      handle.db,
    );
    await sql`ANALYZE workflows`.execute(handle.db);
    const cutoff = new Date(Date.now() - 30 * DAY_MS);
    // The sweep's statement (retention.ts deleteBatch), explained.
    const plan = await sql<{ 'QUERY PLAN': string }>`
      EXPLAIN DELETE FROM workflows
      WHERE id IN (
        SELECT id FROM workflows
        WHERE finished_at < ${cutoff} AND status IN ('completed', 'failed', 'cancelled')
        ORDER BY finished_at
        LIMIT ${500}
        FOR UPDATE SKIP LOCKED
      )`.execute(handle.db);
    const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
    expect(text).toMatch(/Index Scan using workflows_finished/);
    expect(text).toMatch(/Index Scan using workflows_pkey/);
    expect(text).not.toMatch(/Seq Scan/);
  });
});
