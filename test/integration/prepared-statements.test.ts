import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
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
    // Inside a transaction the failure cannot be retried: the caller gets it, then the next one works.
    await migrateElsewhere('ALTER TABLE things ADD COLUMN size integer NOT NULL DEFAULT 3');
    await expect(handle.db.transaction().execute((tx) => read().execute(tx))).rejects.toThrow(
      /cached plan must not change result type/,
    );
    expect((await read().execute(handle.db)).rows[0]).toMatchObject({ colour: 'red', size: 3 });
  });
});
