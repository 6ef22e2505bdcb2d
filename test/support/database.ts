import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { withDatabase } from './global-setup.js';

export interface TestDatabase {
  name: string;
  url: string;
  /**
   * The event hubs of the test apps started on it (app.ts): each looks for
   * the others when one starts, so replicas on one database hear each other
   * from then on, where a replica's own look would come within a second.
   */
  hubs: Set<{ lookForOthers(): Promise<void> }>;
  drop(): Promise<void>;
}

/** A fresh database cloned from the migrated template, for one test file. */
export async function createTestDatabase(
  options: { migrated?: boolean } = {},
): Promise<TestDatabase> {
  const adminUrl = inject('testDatabaseAdminUrl');
  const name = `waymark_test_${randomBytes(6).toString('hex')}`;
  const template = options.migrated === false ? 'template0' : inject('testDatabaseTemplate');
  await withAdmin(adminUrl, (client) =>
    client.query(`CREATE DATABASE ${name} TEMPLATE ${template}`),
  );
  return {
    name,
    url: withDatabase(adminUrl, name),
    hubs: new Set(),
    async drop() {
      await withAdmin(adminUrl, async (client) => {
        // pg's pool.end() resolves before the server has seen every
        // connection close; forcing the drop then would kill those
        // connections mid-goodbye and fail the test file with an unhandled
        // error. Wait for them, and force only what is truly left over.
        for (let waited = 0; waited < 5_000; waited += 50) {
          const { rows } = await client.query<{ count: string }>(
            'SELECT count(*) AS count FROM pg_stat_activity WHERE datname = $1',
            [name],
          );
          if (Number(rows[0]?.count ?? 0) === 0) break;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      });
    },
  };
}

async function withAdmin<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/**
 * The backend of a statement in this database that waits for a lock (a
 * writer queued behind a row lock the test holds, say), polled for up to
 * 15 s through `db` (a pool or a client not itself waiting). `writing`: only
 * a statement that mentions this text (a lease renewal may wait on the same
 * row). `behind`: only one that waits for that backend (itself waiting for
 * another lock, say).
 */
export async function lockWaiter(
  db: Pick<pg.Pool, 'query'>,
  writing?: string,
  behind?: number,
): Promise<number> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const { rows } = await db.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
       WHERE wait_event_type = 'Lock' AND datname = current_database() AND pid <> pg_backend_pid()
         AND ($1::text IS NULL OR strpos(query, $1) > 0)
         AND ($2::integer IS NULL OR $2 = ANY(pg_blocking_pids(pid)))`,
      [writing ?? null, behind ?? null],
    );
    const pid = rows[0]?.pid;
    if (pid !== undefined) return pid;
    if (Date.now() > deadline) {
      // What each session was doing instead, for whoever reads the failure.
      const { rows: sessions } = await db.query(
        `SELECT pid, state, wait_event_type, wait_event, left(query, 120) AS query
         FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      throw new Error(`nothing waited for a lock: ${JSON.stringify(sessions)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
