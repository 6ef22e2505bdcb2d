import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { processesNaming, waymarkProcesses } from '../support/process.js';

/**
 * SIGTERM that arrives while the process is still starting: the README
 * promises that SIGTERM stops everything (embedded PostgreSQL included) and
 * that the next start reuses the data folder; a replica waiting for another
 * one's migration lock must still stop within its grace period.
 */

const processes = waymarkProcesses();
const dataDirs: string[] = [];
const databases: TestDatabase[] = [];

afterEach(async () => {
  await processes.killAll();
});
afterAll(async () => {
  await processes.killAll();
  await Promise.all(databases.map((database) => database.drop()));
  await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function freshDataDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-start-'));
  dataDirs.push(dir);
  return dir;
}

async function noProcessNaming(dir: string, timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let left = await processesNaming(dir);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(200);
    left = await processesNaming(dir);
  }
  return left;
}

describe('SIGTERM during startup', () => {
  it('during the first start’s initdb: the process stops cleanly and the next start on the same data folder gets ready', async () => {
    const dataDir = await freshDataDir();
    const first = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, SHUTDOWN_GRACE_MS: '2000' },
    });
    await first.waitForStdout(/initialising embedded PostgreSQL cluster/, 30_000);
    const exit = await first.stop('SIGTERM', 30_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    // Whatever it started must not outlive it (initdb, postgres).
    const leftBehind = await noProcessNaming(dataDir, 30_000);

    const second = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, SHUTDOWN_GRACE_MS: '2000' },
    });
    let ready: unknown;
    try {
      await second.waitUntilReady(60_000);
      ready = true;
    } catch (error) {
      ready =
        (error as Error).message
          .split('\n')
          .filter((line) => line.includes('fatal') || line.includes('"level":60'))
          .join('\n') || (error as Error).message.slice(0, 2000);
    }
    expect(ready, 'the second start on the same data folder').toBe(true);
    expect(leftBehind, 'processes of the first start still running after its exit').toEqual([]);
  }, 180_000);

  it('while waiting for another replica’s migration lock: exits within the grace period', async () => {
    const database = await createTestDatabase();
    databases.push(database);
    const dataDir = await freshDataDir();
    // Another replica is migrating: it holds the migration lock in its transaction.
    const other = new pg.Client({ connectionString: database.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT pg_advisory_xact_lock($1)', [0x7761796d61726bn.toString()]);
      const waymark = await processes.start({
        env: { DATABASE_URL: database.url, WAYMARK_DATA_DIR: dataDir, SHUTDOWN_GRACE_MS: '1000' },
      });
      // Wait until it queues on the lock.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const { rows } = await other.query<{ n: string }>(
          "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        );
        if (Number(rows[0]?.n) > 0) break;
        if (Date.now() > deadline) throw new Error('the replica never waited for the lock');
        await sleep(100);
      }
      waymark.signal('SIGTERM');
      const exited = await waymark.waitForExit(15_000).then(
        (result) => result,
        () => 'still running 15 s after SIGTERM (SHUTDOWN_GRACE_MS 1000)',
      );
      expect(exited).toMatchObject({ signal: null });
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      await other.end();
    }
  }, 120_000);
});
