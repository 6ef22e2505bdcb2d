import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DatabaseHandle, inTransaction, openDatabase } from '../../src/store/database.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * Named prepared statements (src/store/prepared-statements.ts) against a
 * real PostgreSQL: which statements get a name, and a prepared `*`
 * statement surviving its table gaining a column, as in a rolling upgrade
 * where another replica migrates.
 */

let database: TestDatabase;
let handle: DatabaseHandle;

beforeAll(async () => {
  database = await createTestDatabase({ migrated: false });
  // One connection: what it has prepared is what `pg_prepared_statements` lists.
  handle = openDatabase({
    url: database.url,
    poolMax: 1,
    log: pino({ level: 'silent' }),
    preparedStatements: true,
  });
  await handle.pool.query('CREATE TABLE things (id integer PRIMARY KEY, label text)');
  await handle.pool.query("INSERT INTO things VALUES (1, 'one'), (2, 'two')");
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

async function preparedTexts(): Promise<string[]> {
  const { rows } = await sql<{ statement: string }>`
    SELECT statement FROM pg_prepared_statements ORDER BY prepare_time`.execute(handle.db);
  return rows.map((row) => row.statement);
}

/** Another replica's migration, on a connection of its own. */
async function migrateElsewhere(statement: string): Promise<void> {
  const other = new pg.Client({ connectionString: database.url });
  await other.connect();
  try {
    await other.query(statement);
  } finally {
    await other.end();
  }
}

describe('named prepared statements', () => {
  it('a statement with parameters is prepared once and then reused', async () => {
    for (const id of [1, 2, 1]) {
      const { rows } = await sql<{ label: string }>`
        SELECT label FROM things WHERE id = ${id}`.execute(handle.db);
      expect(rows).toHaveLength(1);
    }
    const texts = (await preparedTexts()).filter((text) => text.includes('FROM things'));
    expect(texts).toHaveLength(1);
  });

  it('statements without parameters, and several commands in one text, run unnamed', async () => {
    await handle.pool.query('SELECT 1; SELECT 2');
    await sql`SELECT count(*) FROM things`.execute(handle.db);
    expect((await preparedTexts()).some((text) => text.includes('count(*)'))).toBe(false);
  });

  it('a statement with more parameters than the cap runs unnamed', async () => {
    const ids = Array.from({ length: 65 }, (_, index) => index);
    await sql`SELECT count(*) FROM things WHERE id IN (${sql.join(ids)})`.execute(handle.db);
    expect((await preparedTexts()).some((text) => text.includes('IN ('))).toBe(false);
  });

  it('a prepared `*` statement still answers after its table gains a column', async () => {
    const read = () => sql<Record<string, unknown>>`SELECT * FROM things WHERE id = ${1}`;
    expect((await read().execute(handle.db)).rows[0]).toEqual({ id: 1, label: 'one' });
    await migrateElsewhere("ALTER TABLE things ADD COLUMN colour text NOT NULL DEFAULT 'red'");
    expect((await read().execute(handle.db)).rows[0]).toEqual({
      id: 1,
      label: 'one',
      colour: 'red',
    });
  });

  it('a transaction that meets stale `*` statements runs again, once for each, and commits once', async () => {
    const read = () => sql<Record<string, unknown>>`SELECT * FROM things WHERE id = ${2}`;
    const write = (label: string) =>
      sql<Record<string, unknown>>`UPDATE things SET label = ${label} WHERE id = ${2} RETURNING *`;
    await inTransaction(handle.db, async (tx) => {
      await read().execute(tx);
      await write('two').execute(tx);
    });
    await migrateElsewhere('ALTER TABLE things ADD COLUMN size integer NOT NULL DEFAULT 3');
    let runs = 0;
    const written = await inTransaction(handle.db, async (tx) => {
      runs += 1;
      await read().execute(tx);
      return (await write('zwei').execute(tx)).rows[0];
    });
    expect(written).toMatchObject({ id: 2, label: 'zwei', size: 3 });
    // The read failed in the first run, the update in the second.
    expect(runs).toBe(3);
    // Kysely's own transaction gets the failure: its caller would have to start again.
    await migrateElsewhere('ALTER TABLE things ADD COLUMN weight integer NOT NULL DEFAULT 4');
    await expect(handle.db.transaction().execute((tx) => read().execute(tx))).rejects.toThrow(
      /cached plan must not change result type/,
    );
    expect((await read().execute(handle.db)).rows[0]).toMatchObject({ size: 3, weight: 4 });
  });

  it('a transaction refused for another reason runs once', async () => {
    let runs = 0;
    await expect(
      inTransaction(handle.db, async (tx) => {
        runs += 1;
        await sql`SELECT * FROM things WHERE id = ${'not a number'}`.execute(tx);
      }),
    ).rejects.toThrow(/invalid input syntax/);
    expect(runs).toBe(1);
  });
});
