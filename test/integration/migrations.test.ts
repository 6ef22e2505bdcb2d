import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  MigrationStateError,
  migrate,
  migrationsAreCurrent,
  readMigrations,
} from '../../src/store/migrate.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

const log = pino({ level: 'silent' });
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function emptyDatabase(): Promise<{ database: TestDatabase; pool: pg.Pool }> {
  const database = await createTestDatabase({ migrated: false });
  const pool = new pg.Pool({ connectionString: database.url, max: 4 });
  cleanups.push(async () => {
    await pool.end();
    await database.drop();
  });
  return { database, pool };
}

async function tables(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
  );
  return rows.map((row) => row.name);
}

describe('migrations', () => {
  it('apply every migration to an empty database, then nothing on the next start', async () => {
    const { pool } = await emptyDatabase();
    const known = await readMigrations();
    expect(await migrate(pool, log)).toEqual({
      applied: known.map((m) => m.name),
      current: known.length,
    });
    expect(await tables(pool)).toEqual(
      expect.arrayContaining(['tenants', 'api_keys', 'waymark_migrations']),
    );
    expect(await migrate(pool, log)).toEqual({ applied: [], current: known.length });
    expect(await migrationsAreCurrent(pool, known)).toBe(true);
  });

  it('five replicas migrating the same empty database at once apply each migration once', async () => {
    const { database } = await emptyDatabase();
    const pools = Array.from(
      { length: 5 },
      () => new pg.Pool({ connectionString: database.url, max: 1 }),
    );
    cleanups.push(async () => {
      await Promise.all(pools.map((pool) => pool.end()));
    });
    const results = await Promise.all(pools.map((pool) => migrate(pool, log)));
    const known = await readMigrations();
    expect(results.filter((result) => result.applied.length === known.length)).toHaveLength(1);
    expect(results.filter((result) => result.applied.length === 0)).toHaveLength(4);
    const [first] = pools;
    if (!first) throw new Error('no pool');
    const { rows } = await first.query('SELECT id FROM waymark_migrations ORDER BY id');
    expect(rows.map((row) => row.id)).toEqual(known.map((m) => m.id));
  });

  it('refuse a database that carries a migration this build does not know', async () => {
    const { pool } = await emptyDatabase();
    await migrate(pool, log);
    await pool.query(
      "INSERT INTO waymark_migrations (id, name, checksum) VALUES (999, '0999_future.sql', 'x')",
    );
    await expect(migrate(pool, log)).rejects.toThrow(MigrationStateError);
    await expect(migrate(pool, log)).rejects.toThrow(/0999_future\.sql.*does not know/);
    // Only a start refuses it: a replica already running stays ready beside the newer release.
    expect(await migrationsAreCurrent(pool, await readMigrations())).toBe(true);
  });

  it('refuse a database whose transactions default to another isolation than read committed', async () => {
    const { database, pool } = await emptyDatabase();
    // A database's settings apply to connections opened after the change.
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    try {
      for (const level of ['repeatable read', 'serializable']) {
        await admin.query(
          `ALTER DATABASE ${database.name} SET default_transaction_isolation = '${level}'`,
        );
        const strict = new pg.Pool({ connectionString: database.url, max: 1 });
        try {
          await expect(migrate(strict, log)).rejects.toThrow(MigrationStateError);
          await expect(migrate(strict, log)).rejects.toThrow(
            new RegExp(`default to ${level} isolation; Waymark needs read committed`),
          );
        } finally {
          await strict.end();
        }
      }
      expect(await tables(pool)).toEqual([]);

      await admin.query(`ALTER DATABASE ${database.name} RESET default_transaction_isolation`);
      const reset = new pg.Pool({ connectionString: database.url, max: 1 });
      try {
        await migrate(reset, log);
        expect(await migrationsAreCurrent(reset, await readMigrations())).toBe(true);
      } finally {
        await reset.end();
      }
    } finally {
      await admin.end();
    }
  });

  it('refuse a database whose applied migration was edited afterwards', async () => {
    const { pool } = await emptyDatabase();
    await migrate(pool, log);
    const edited = (await readMigrations()).map((m, i) =>
      i === 0 ? { ...m, checksum: 'edited' } : m,
    );
    await expect(migrate(pool, log, { migrations: edited })).rejects.toThrow(
      /differs from the one applied/,
    );
  });

  it('a failing migration leaves nothing half-applied', async () => {
    const { pool } = await emptyDatabase();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'waymark-migrations-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(path.join(dir, '0001_good.sql'), 'CREATE TABLE first_table (id int);');
    await writeFile(
      path.join(dir, '0002_bad.sql'),
      'CREATE TABLE second_table (id int); SELECT no_such_function();',
    );
    await expect(migrate(pool, log, { migrations: await readMigrations(dir) })).rejects.toThrow(
      /no_such_function/,
    );
    expect(await tables(pool)).toEqual([]);
  });

  it('0018 gives each existing session its last message’s time as its last activity, or its creation', async () => {
    const { pool } = await emptyDatabase();
    const known = await readMigrations();
    const before = known.findIndex((m) => m.name === '0018_sessions_last_activity.sql');
    expect(before).toBeGreaterThan(0);
    await migrate(pool, log, { migrations: known.slice(0, before) });
    await pool.query(`
      INSERT INTO tenants (id, name) VALUES ('00000000-0000-4000-8000-000000000001', 't');
      INSERT INTO sessions (id, tenant_id, last_seq, created_at, updated_at) VALUES
        ('00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-000000000001', 4,
         '2026-01-01 10:00:00.000001+00', '2026-03-01 10:00:00+00'),
        ('00000000-0000-4000-8000-00000000000b', '00000000-0000-4000-8000-000000000001', 0,
         '2026-01-02 10:00:00.000002+00', '2026-03-01 10:00:00+00');
      INSERT INTO session_messages (session_id, tenant_id, seq, role, content, created_at)
      SELECT '00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-000000000001',
        seq, CASE WHEN seq % 2 = 1 THEN 'user' ELSE 'assistant' END, 'm',
        timestamptz '2026-02-01 10:00:00.000007+00' + ((seq + 1) / 2) * interval '1 day'
      FROM generate_series(1, 4) AS seq;
    `);
    await migrate(pool, log);

    const { rows } = await pool.query<{ id: string; activity: string }>(
      `SELECT id, to_char(last_activity_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS activity
       FROM sessions ORDER BY id`,
    );
    expect(rows).toEqual([
      // Its last message's (seqs 3 and 4 were appended together, as a workflow's pair).
      { id: '00000000-0000-4000-8000-00000000000a', activity: '2026-02-03 10:00:00.000007' },
      // No messages: its creation, not its updated_at.
      { id: '00000000-0000-4000-8000-00000000000b', activity: '2026-01-02 10:00:00.000002' },
    ]);
    // A session inserted afterwards starts at its creation; the column takes no NULL.
    const inserted = await pool.query<{ same: boolean }>(
      `INSERT INTO sessions (id, tenant_id) VALUES
         ('00000000-0000-4000-8000-00000000000c', '00000000-0000-4000-8000-000000000001')
       RETURNING last_activity_at = created_at AS same`,
    );
    expect(inserted.rows).toEqual([{ same: true }]);
    await expect(
      pool.query(
        `UPDATE sessions SET last_activity_at = NULL WHERE id = '00000000-0000-4000-8000-00000000000c'`,
      ),
    ).rejects.toThrow(/null value/);
  });

  it('0030 refuses exactly the workflow rows that the seven checks it replaces refused', async () => {
    const known = await readMigrations();
    const at = known.findIndex((m) => m.name === '0030_workflows_one_check.sql');
    expect(at).toBeGreaterThan(0);
    const before = await emptyDatabase();
    await migrate(before.pool, log, { migrations: known.slice(0, at) });
    const after = await emptyDatabase();
    await migrate(after.pool, log, { migrations: known.slice(0, at + 1) });

    const finished = "'2026-01-01T00:00:00Z'";
    // Rows that keep every part of the check,
    const kept: Record<string, string> = {
      queued: "'queued', NULL, NULL, 'auto', NULL, NULL",
      'running, simple, with a budget': `'running', NULL, NULL, 'simple', 'simple', '{"maxIterations": 3}'`,
      'paused for a clarification':
        "'awaiting_input', 'clarification', NULL, 'complex', 'complex', NULL",
      'paused for a tool approval':
        "'awaiting_input', 'tool_approval', NULL, 'auto', 'simple', NULL",
      completed: `'completed', NULL, ${finished}, 'auto', 'simple', NULL`,
      cancelled: `'cancelled', NULL, ${finished}, 'auto', NULL, NULL`,
    };
    // and rows that break one part each.
    const broken: Record<string, string> = {
      'an unknown status': "'sleeping', NULL, NULL, 'auto', NULL, NULL",
      'an unknown reason': "'awaiting_input', 'lunch', NULL, 'auto', NULL, NULL",
      'an unknown mode': "'queued', NULL, NULL, 'bogus', NULL, NULL",
      'an unknown kind': "'running', NULL, NULL, 'auto', 'medium', NULL",
      'a budget that is not an object': "'queued', NULL, NULL, 'auto', NULL, '[1]'",
      'paused without a reason': "'awaiting_input', NULL, NULL, 'auto', NULL, NULL",
      'a reason while running': "'running', 'checkpoint', NULL, 'auto', NULL, NULL",
      'finished without a time': "'failed', NULL, NULL, 'auto', NULL, NULL",
      'a finish time while queued': `'queued', NULL, ${finished}, 'auto', NULL, NULL`,
      'a finish time while paused': `'awaiting_input', 'checkpoint', ${finished}, 'auto', NULL, NULL`,
    };
    const outcomes = async (pool: pg.Pool) => {
      const tenant = '00000000-0000-4000-8000-000000000001';
      await pool.query(`INSERT INTO tenants (id, name) VALUES ('${tenant}', 't')`);
      const seen: Record<string, string> = {};
      for (const [name, values] of Object.entries({ ...kept, ...broken })) {
        try {
          await pool.query(
            `INSERT INTO workflows (id, tenant_id, model, input, tools, metadata,
               status, awaiting_reason, finished_at, mode, kind, budget)
             VALUES (gen_random_uuid(), '${tenant}', 'm', 'q', '{}', '{}', ${values})`,
          );
          seen[name] = 'stored';
        } catch (error) {
          seen[name] = (error as { code?: string }).code ?? String(error);
        }
      }
      return seen;
    };
    const old = await outcomes(before.pool);
    expect(await outcomes(after.pool)).toEqual(old);
    const refused = Object.keys(old).filter((name) => old[name] !== 'stored');
    expect(refused).toEqual(Object.keys(broken));
    expect(new Set(refused.map((name) => old[name]))).toEqual(new Set(['23514']));
  });

  it('reject misnamed or gapped migration files instead of skipping them', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'waymark-migrations-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(path.join(dir, '0001_a.sql'), 'SELECT 1;');
    await writeFile(path.join(dir, '0003_c.sql'), 'SELECT 1;');
    await expect(readMigrations(dir)).rejects.toThrow(/without gaps/);
    await rm(path.join(dir, '0003_c.sql'));
    await writeFile(path.join(dir, '0002-b.sql'), 'SELECT 1;');
    await expect(readMigrations(dir)).rejects.toThrow(/0001_name\.sql/);
  });
});
