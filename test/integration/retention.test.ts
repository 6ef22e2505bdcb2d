import { randomUUID } from 'node:crypto';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import type { Database } from '../../src/store/schema.js';
import { createRetentionSweeper } from '../../src/workflows/retention.js';
import type { WorkflowStatus } from '../../src/workflows/types.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

const log = pino({ level: 'silent' });
const DAY_MS = 86_400_000;
const NOW = new Date('2030-06-01T12:00:00Z');
let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;
let tenantId: string;

beforeAll(async () => {
  setup = await createTenantDatabase({ poolMax: 4 });
  ({ handle, tenantId } = setup);
});
afterAll(async () => {
  await setup?.close();
});
beforeEach(async () => {
  await sql`DELETE FROM workflows`.execute(handle.db);
});

function daysBefore(days: number): Date {
  return new Date(NOW.getTime() - days * DAY_MS);
}

/** Inserts `count` workflows in one statement, each with `events` events; returns their ids. */
async function insertWorkflows(input: {
  status: WorkflowStatus;
  /** For finished workflows; unfinished ones have none. */
  finishedAt?: Date;
  createdAt?: Date;
  count?: number;
  events?: number;
}): Promise<string[]> {
  const ids = Array.from({ length: input.count ?? 1 }, () => randomUUID());
  const awaitingReason = input.status === 'awaiting_input' ? 'checkpoint' : null;
  await sql`
    INSERT INTO workflows (id, tenant_id, status, awaiting_reason, mode, model, input,
                           last_seq, created_at, finished_at)
    SELECT id, ${tenantId}, ${input.status}, ${awaitingReason}, 'auto', 'scripted', 'question',
           ${input.events ?? 0}, ${input.createdAt ?? input.finishedAt ?? NOW}, ${input.finishedAt ?? null}
    FROM unnest(${ids}::uuid[]) AS id`.execute(handle.db);
  if (input.events) {
    await sql`
      INSERT INTO workflow_events (workflow_id, seq, tenant_id, type, status)
      SELECT id, seq, ${tenantId}, 'warning', 'info'
      FROM unnest(${ids}::uuid[]) AS id, generate_series(1, ${input.events}) AS seq`.execute(
      handle.db,
    );
  }
  return ids;
}

async function remainingIds(): Promise<string[]> {
  const rows = await handle.db.selectFrom('workflows').select('id').execute();
  return rows.map((row) => row.id).sort();
}

async function eventCount(ids: string[]): Promise<number> {
  const row = await handle.db
    .selectFrom('workflow_events')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('workflow_id', 'in', ids)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

function sweeper(options: { retentionDays?: number; intervalMs?: number } = {}) {
  return createRetentionSweeper({
    db: handle.db,
    log,
    retentionDays: options.retentionDays ?? 30,
    intervalMs: options.intervalMs ?? 3_600_000,
  });
}

describe('retention sweep', () => {
  it('deletes finished workflows past retention with their events; keeps recent and unfinished ones', async () => {
    const old = [
      ...(await insertWorkflows({ status: 'completed', finishedAt: daysBefore(31), events: 5 })),
      ...(await insertWorkflows({ status: 'failed', finishedAt: daysBefore(90), events: 3 })),
      ...(await insertWorkflows({ status: 'cancelled', finishedAt: daysBefore(30.01) })),
    ];
    const kept = [
      ...(await insertWorkflows({ status: 'completed', finishedAt: daysBefore(29), events: 4 })),
      ...(await insertWorkflows({ status: 'running', createdAt: daysBefore(400), events: 2 })),
      ...(await insertWorkflows({ status: 'queued', createdAt: daysBefore(400) })),
      ...(await insertWorkflows({ status: 'awaiting_input', createdAt: daysBefore(400) })),
    ];

    expect((await sweeper().sweepOnce(NOW)).workflows).toBe(3);

    expect(await remainingIds()).toEqual([...kept].sort());
    expect(await eventCount(old)).toBe(0);
    expect(await eventCount(kept)).toBe(6);
    // Nothing left to do: a second sweep deletes nothing.
    expect((await sweeper().sweepOnce(NOW)).workflows).toBe(0);
  });

  it('a backlog larger than one batch is deleted completely in one sweep', async () => {
    await insertWorkflows({
      status: 'completed',
      finishedAt: daysBefore(60),
      count: 1_234,
      events: 2,
    });
    const recent = await insertWorkflows({ status: 'completed', finishedAt: daysBefore(1) });

    // The same pool, through a Kysely that counts the DELETEs it runs.
    let deletes = 0;
    const counting = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: handle.pool }),
      log(event) {
        if (event.level === 'query' && /^\s*DELETE FROM workflows/.test(event.query.sql)) deletes++;
      },
    });
    const sweep = createRetentionSweeper({
      db: counting,
      log,
      retentionDays: 30,
      intervalMs: 1000,
    });

    expect((await sweep.sweepOnce(NOW)).workflows).toBe(1_234);
    // 500 + 500 + 234: the short third batch ends the sweep.
    expect(deletes).toBe(3);

    expect(await remainingIds()).toEqual(recent);
    const events = await sql<{ count: string }>`SELECT count(*) FROM workflow_events`.execute(
      handle.db,
    );
    expect(Number(events.rows[0]?.count)).toBe(0);
  });

  it('two replicas sweeping at once delete every row exactly once between them', async () => {
    await insertWorkflows({ status: 'failed', finishedAt: daysBefore(45), count: 1_700 });

    const counts = await Promise.all([sweeper().sweepOnce(NOW), sweeper().sweepOnce(NOW)]);

    expect(counts[0].workflows + counts[1].workflows).toBe(1_700);
    expect(await remainingIds()).toEqual([]);
  });

  it('retention 0 disables the sweep: nothing is deleted and start() schedules nothing', async () => {
    const ids = await insertWorkflows({ status: 'completed', finishedAt: daysBefore(10_000) });
    const disabled = sweeper({ retentionDays: 0, intervalMs: 1000 });

    expect((await disabled.sweepOnce(NOW)).workflows).toBe(0);
    disabled.start();
    await new Promise((resolve) => setTimeout(resolve, 100));
    await disabled.stop();

    expect(await remainingIds()).toEqual(ids);
  });

  it('start() sweeps at once and again every interval until stop()', async () => {
    await insertWorkflows({ status: 'completed', finishedAt: new Date(Date.now() - 31 * DAY_MS) });
    const running = sweeper({ intervalMs: 1000 });
    running.start();
    try {
      await expect.poll(remainingIds, { timeout: 5_000 }).toEqual([]);
      await insertWorkflows({
        status: 'cancelled',
        finishedAt: new Date(Date.now() - 31 * DAY_MS),
      });
      await expect.poll(remainingIds, { timeout: 5_000 }).toEqual([]);
    } finally {
      await running.stop();
    }
    const late = await insertWorkflows({
      status: 'failed',
      finishedAt: new Date(Date.now() - 31 * DAY_MS),
    });
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await remainingIds()).toEqual(late);
  });
});
