import { randomUUID } from 'node:crypto';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import type { Database } from '../../src/store/schema.js';
import { createRetentionSweeper } from '../../src/workflows/retention.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/** USAGE_LEDGER_RETENTION_DAYS: the sweep's deletes of `llm_calls` rows. */

const log = pino({ level: 'silent' });
const DAY_MS = 86_400_000;
const NOW = new Date('2030-06-01T12:00:00Z');
let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;
let tenants: string[];

beforeAll(async () => {
  setup = await createTenantDatabase({ poolMax: 4 });
  handle = setup.handle;
  const others = [randomUUID(), randomUUID()];
  await sql`
    INSERT INTO tenants (id, name) SELECT id, 'ledger' FROM unnest(${others}::uuid[]) AS id`.execute(
    handle.db,
  );
  tenants = [setup.tenantId, ...others];
});
afterAll(async () => {
  await setup?.close();
});
beforeEach(async () => {
  await sql`DELETE FROM llm_calls`.execute(handle.db);
  await sql`DELETE FROM workflows`.execute(handle.db);
});

function daysBefore(days: number): Date {
  return new Date(NOW.getTime() - days * DAY_MS);
}

/** `count` ledger rows for each tenant, their calls started at `startedAt`. */
async function insertCalls(startedAt: Date, count = 1): Promise<void> {
  await sql`
    INSERT INTO llm_calls (tenant_id, workflow_id, provider, model, model_id, attempt,
      input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd,
      latency_ms, outcome, started_at)
    SELECT tenant, NULL, 'openai', 'bench', 'bench-model', 1, 10, 2, 0, 0, 0.0001, 5, 'ok',
      ${startedAt}
    FROM unnest(${tenants}::uuid[]) AS tenant, generate_series(1, ${count})`.execute(handle.db);
}

async function callsStarted(): Promise<{ tenant: string; startedAt: string; count: number }[]> {
  const { rows } = await sql<{ tenant: string; started_at: Date; count: string }>`
    SELECT tenant_id AS tenant, started_at, count(*) AS count FROM llm_calls
    GROUP BY 1, 2 ORDER BY 2, 1`.execute(handle.db);
  return rows.map((row) => ({
    tenant: row.tenant,
    startedAt: row.started_at.toISOString(),
    count: Number(row.count),
  }));
}

function sweeper(options: {
  retentionDays?: number;
  ledgerRetentionDays?: number;
  db?: typeof handle.db;
}) {
  return createRetentionSweeper({
    db: options.db ?? handle.db,
    log,
    retentionDays: options.retentionDays ?? 0,
    ledgerRetentionDays: options.ledgerRetentionDays,
    intervalMs: 3_600_000,
  });
}

describe('usage ledger retention', () => {
  it('deletes every tenant’s calls started before the cutoff and keeps the later ones', async () => {
    await insertCalls(daysBefore(400), 2);
    await insertCalls(daysBefore(366));
    await insertCalls(daysBefore(364), 3);
    const finished = randomUUID();
    await sql`
      INSERT INTO workflows (id, tenant_id, status, mode, model, input, created_at, finished_at)
      VALUES (${finished}, ${tenants[0]}, 'completed', 'auto', 'scripted', 'q', ${daysBefore(400)}, ${daysBefore(400)})`.execute(
      handle.db,
    );

    // Workflow retention off: the ledger has its own age.
    expect(await sweeper({ ledgerRetentionDays: 365 }).sweepOnce(NOW)).toEqual({
      workflows: 0,
      llmCalls: 3 * tenants.length,
      apiKeys: 0,
      expired: 0,
    });

    const later = daysBefore(364).toISOString();
    expect(await callsStarted()).toEqual(
      [...tenants].sort().map((tenant) => ({ tenant, startedAt: later, count: 3 })),
    );
    const workflows = await sql`SELECT id FROM workflows`.execute(handle.db);
    expect(workflows.rows).toEqual([{ id: finished }]);
    expect(await sweeper({ ledgerRetentionDays: 365 }).sweepOnce(NOW)).toEqual({
      workflows: 0,
      llmCalls: 0,
      apiKeys: 0,
      expired: 0,
    });
  });

  it('0, the default, keeps the ledger while workflows past their retention go', async () => {
    await insertCalls(daysBefore(10_000));
    const old = randomUUID();
    await sql`
      INSERT INTO workflows (id, tenant_id, status, mode, model, input, created_at, finished_at)
      VALUES (${old}, ${tenants[0]}, 'completed', 'auto', 'scripted', 'q', ${daysBefore(40)}, ${daysBefore(40)})`.execute(
      handle.db,
    );
    await sql`UPDATE llm_calls SET workflow_id = ${old}`.execute(handle.db);

    expect(await sweeper({ retentionDays: 30 }).sweepOnce(NOW)).toEqual({
      workflows: 1,
      llmCalls: 0,
      apiKeys: 0,
      expired: 0,
    });
    expect(await sweeper({ retentionDays: 30, ledgerRetentionDays: 0 }).sweepOnce(NOW)).toEqual({
      workflows: 0,
      llmCalls: 0,
      apiKeys: 0,
      expired: 0,
    });
    expect((await callsStarted()).map((row) => row.count)).toEqual(tenants.map(() => 1));
  });

  it('a backlog past one batch goes in full; two replicas sweeping at once delete each row once', async () => {
    // 3 tenants x 700: more than four batches of 500, each tenant's range over several.
    await insertCalls(daysBefore(500), 700);
    await insertCalls(daysBefore(1));

    let deletes = 0;
    const counting = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: handle.pool }),
      log(event) {
        if (event.level === 'query' && /^\s*DELETE FROM llm_calls/.test(event.query.sql)) deletes++;
      },
    });
    const counts = await Promise.all([
      sweeper({ ledgerRetentionDays: 90, db: counting }).sweepOnce(NOW),
      sweeper({ ledgerRetentionDays: 90, db: counting }).sweepOnce(NOW),
    ]);

    expect(counts[0].llmCalls + counts[1].llmCalls).toBe(2_100);
    expect(deletes).toBeGreaterThanOrEqual(5);
    expect((await callsStarted()).map((row) => row.count)).toEqual(tenants.map(() => 1));
  });

  it('the purge reads each tenant’s range through llm_calls_tenant_time, never the whole table', async () => {
    await insertCalls(daysBefore(500), 20_000);
    await insertCalls(daysBefore(1), 20_000);
    await sql`ANALYZE llm_calls`.execute(handle.db);

    let statement: { sql: string; parameters: readonly unknown[] } | undefined;
    const capturing = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: handle.pool }),
      log(event) {
        if (event.level === 'query' && /^\s*DELETE FROM llm_calls/.test(event.query.sql))
          statement ??= event.query;
      },
    });
    await sweeper({ ledgerRetentionDays: 90, db: capturing }).sweepOnce(NOW);
    if (!statement) throw new Error('the sweep ran no DELETE on llm_calls');

    const plan = await handle.pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement.sql}`, [
      ...statement.parameters,
    ]);
    const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
    expect(text).toMatch(/Index Scan using llm_calls_tenant_time/);
    expect(text).not.toMatch(/Seq Scan on llm_calls/);
  });
});
