import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openDatabase } from '../../src/store/database.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { type Pgbouncer, pgbouncerForTests, startPgbouncer } from '../support/pgbouncer.js';
import { waymarkProcesses } from '../support/process.js';

/**
 * A replica whose DATABASE_URL goes through PgBouncer in transaction mode
 * and that has no DATABASE_LISTEN_URL would LISTEN through the pooler: its
 * LISTEN runs on a server session PgBouncer then hands to other clients,
 * and the other replicas' events never reach it. It refuses to start,
 * saying which setting to fix, rather than run deaf.
 */

const binary = pgbouncerForTests('test/e2e/pgbouncer-listen.test.ts');

const processes = waymarkProcesses();
let bouncer: Pgbouncer | undefined;
let database: TestDatabase | undefined;
let dataDir: string | undefined;

describe.skipIf(!binary)('settings refused through PgBouncer in transaction mode', () => {
  beforeAll(async () => {
    bouncer = await startPgbouncer({
      binary: binary as string,
      serverUrl: inject('testDatabaseAdminUrl'),
      poolSize: 2,
    });
    database = await createTestDatabase();
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-pgbouncer-listen-'));
  });

  afterAll(async () => {
    await processes.killAll();
    await bouncer?.stop();
    await database?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('without DATABASE_LISTEN_URL the replica refuses to start, naming DATABASE_LISTEN_URL', async () => {
    if (!bouncer || !database || !dataDir) throw new Error('the setup did not finish');
    const replica = await processes.start({
      env: { DATABASE_URL: bouncer.urlFor(database.url), WAYMARK_DATA_DIR: dataDir },
    });
    const exit = await replica.waitForExit(60_000);
    expect(exit.code).toBe(1);
    const fatal = replica
      .stdout()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { level: number; msg: string; err?: { message: string } })
      .find((line) => line.level === 60);
    expect(fatal?.msg).toBe('waymark failed to start');
    expect(fatal?.err?.message).toMatch(/DATABASE_LISTEN_URL.*transaction-mode pooler/);
  }, 90_000);

  it('with DATABASE_PREPARED_STATEMENTS on, a statement that meets another server session says which setting to change', async () => {
    if (!bouncer || !database) throw new Error('the setup did not finish');
    const through = openDatabase({
      url: bouncer.urlFor(database.url),
      poolMax: 4,
      log: pino({ level: 'silent' }),
      preparedStatements: true,
    });
    try {
      // Four clients over two server sessions: names prepared on one meet the other.
      const results = await Promise.allSettled(
        // Through kysely, as the service's queries go: pool.query's own calls stay unnamed.
        Array.from({ length: 40 }, (_, i) => sql`SELECT ${i}::int AS n`.execute(through.db)),
      );
      const refused = results.flatMap((result) =>
        result.status === 'rejected' ? [result.reason as Error & { code?: string }] : [],
      );
      expect(refused.length).toBeGreaterThan(0);
      for (const error of refused) {
        expect(['26000', '42P05']).toContain(error.code);
        expect(error.message).toMatch(
          /prepared statement "waymark_\d+".*DATABASE_PREPARED_STATEMENTS=off/,
        );
      }
    } finally {
      await through.close();
    }
  });
});
