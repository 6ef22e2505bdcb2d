import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/store/database.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => database?.drop());

async function connectionsTo(name: string): Promise<number> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const { rows } = await client.query<{ count: string }>(
      'SELECT count(*) AS count FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [name],
    );
    return Number(rows[0]?.count);
  } finally {
    await client.end();
  }
}

describe('database handle', () => {
  it.each([
    ['plain', false],
    ['prepared statements', true],
  ])(
    'a connection whose backend was terminated is not handed out again (%s)',
    async (_name, preparedStatements) => {
      const handle = openDatabase({
        url: database.url,
        poolMax: 1,
        log: pino({ level: 'silent' }),
        preparedStatements,
      });
      const admin = new pg.Client({ connectionString: database.url });
      await admin.connect();
      try {
        for (let round = 0; round < 5; round++) {
          const sleeping = sql<{ pid: number }>`SELECT pg_backend_pid() AS pid, pg_sleep(${30})`
            .execute(handle.db)
            .then(
              () => undefined,
              (error: unknown) => error,
            );
          await expect
            .poll(async () => {
              const { rows } = await admin.query(
                `SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()`,
                [database.name],
              );
              return rows.length;
            })
            .toBe(1);
          await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE datname = $1 AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()`,
            [database.name],
          );
          expect(await sleeping).toMatchObject({ code: '57P01' });
          // The pool's one connection was the terminated one: the next statement gets a new one.
          const { rows } = await sql<{ one: number }>`SELECT ${1}::int AS one`.execute(handle.db);
          expect(rows).toEqual([{ one: 1 }]);
        }
      } finally {
        await admin.end();
        await handle.close();
      }
    },
  );

  it('close() ends the pool even when only the raw pool was used', async () => {
    const handle = openDatabase({ url: database.url, poolMax: 2, log: pino({ level: 'silent' }) });
    await handle.pool.query('SELECT 1');
    expect(await connectionsTo(database.name)).toBe(1);
    await handle.close();
    expect(handle.pool.ended).toBe(true);
    await expect.poll(() => connectionsTo(database.name), { timeout: 5000 }).toBe(0);
  });

  it('close() ends the pool after kysely queries too, and may be called twice', async () => {
    const handle = openDatabase({ url: database.url, poolMax: 2, log: pino({ level: 'silent' }) });
    await handle.db.selectFrom('tenants').selectAll().execute();
    await handle.close();
    await handle.close();
    expect(handle.pool.ended).toBe(true);
  });

  it('a connection lost while a transaction holds it fails that transaction, not the process; the pool serves again', async () => {
    const warnings: string[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => warnings.push(line) });
    const handle = openDatabase({ url: database.url, poolMax: 1, log });
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    try {
      const transaction = handle.db.transaction().execute(async (tx) => {
        const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(tx);
        await admin.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
        // Between statements the client is checked out with nothing in
        // flight: the loss reaches it as an 'error' event, which would
        // crash the process with no listener.
        await expect.poll(() => warnings.length, { timeout: 5000 }).toBeGreaterThan(0);
        await sql`SELECT 1`.execute(tx);
      });
      await expect(transaction).rejects.toThrow();
      expect(warnings.join('')).toContain('database connection lost');
      const { rows } = await sql<{ one: number }>`SELECT 1 AS one`.execute(handle.db);
      expect(rows).toEqual([{ one: 1 }]);
    } finally {
      await admin.end();
      await handle.close();
    }
  });
});
