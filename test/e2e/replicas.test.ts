import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readMigrations } from '../../src/store/migrate.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  freePorts,
  printedBootstrapKeys,
  type WaymarkProcess,
  waymarkProcesses,
} from '../support/process.js';

/**
 * Replicas behind a load balancer start together on one empty database: the
 * migration and bootstrap locks let exactly one of them do each job once.
 */

const REPLICAS = 3;

const processes = waymarkProcesses();
let database: TestDatabase | undefined;
const dataDirs: string[] = [];

beforeAll(async () => {
  database = await createTestDatabase({ migrated: false });
  for (let i = 0; i < REPLICAS; i++) {
    dataDirs.push(await mkdtemp(path.join(os.tmpdir(), `waymark-e2e-replica-${i}-`)));
  }
});

afterEach(async () => {
  await processes.killAll();
});

afterAll(async () => {
  await processes.killAll();
  await database?.drop();
  await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function query<T extends pg.QueryResultRow>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text)).rows;
  } finally {
    await client.end();
  }
}

describe('replicas starting together on an empty database', () => {
  it('three replicas started at once: all get ready, migrations apply once, one tenant, one printed key, all exit 0 on SIGTERM', async () => {
    if (!database) throw new Error('the test database was not created');
    const url = database.url;
    const ports = await freePorts(REPLICAS);
    // Each start spawns synchronously (its port is given), so all three race.
    const replicas: WaymarkProcess[] = await Promise.all(
      ports.map((port, i) =>
        processes.start({
          port,
          env: {
            DATABASE_URL: url,
            WAYMARK_DATA_DIR: dataDirs[i] as string,
            SHUTDOWN_GRACE_MS: '5000',
          },
        }),
      ),
    );
    await Promise.all(replicas.map((replica) => replica.waitUntilReady(60_000)));

    const migrations = await readMigrations();
    const applied = await query<{ id: number; name: string }>(
      url,
      'SELECT id, name FROM waymark_migrations ORDER BY id',
    );
    expect(applied).toEqual(migrations.map(({ id, name }) => ({ id, name })));

    const tenants = await query<{ name: string; is_operator: boolean }>(
      url,
      'SELECT name, is_operator FROM tenants',
    );
    expect(tenants).toEqual([{ name: 'operator', is_operator: true }]);

    const printed = replicas.map((replica) => printedBootstrapKeys(replica.stdout()));
    expect(printed.filter((keys) => keys.length > 0)).toHaveLength(1);
    const key = printed.flat()[0] as string;
    expect(printed.flat()).toEqual([key]);
    // One database behind them all: the key works on every replica.
    for (const replica of replicas) {
      const me = await fetch(`${replica.url}/v1/me`, {
        headers: { authorization: `Bearer ${key}` },
        signal: AbortSignal.timeout(10_000),
      });
      expect(me.status).toBe(200);
    }

    const exits = await Promise.all(replicas.map((replica) => replica.stop('SIGTERM', 60_000)));
    for (const exit of exits) expect(exit).toMatchObject({ code: 0, signal: null });
  }, 120_000);
});
