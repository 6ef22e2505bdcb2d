import { type CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { DbOrTx } from '../../../src/store/database.js';
import {
  fixedStatement,
  parametersOf,
  statementsByShape,
} from '../../../src/store/fixed-statement.js';

/** A database that records the queries it is asked to run and answers no rows. */
function recordingDb(): { db: DbOrTx; queries: CompiledQuery[] } {
  const queries: CompiledQuery[] = [];
  const db = {
    executeQuery: async (query: CompiledQuery) => {
      queries.push(query);
      return { rows: [] };
    },
  } as unknown as DbOrTx;
  return { db, queries };
}

describe('fixedStatement', () => {
  it('compiles once and binds each run’s values to the parameters by name, a slot used twice twice', async () => {
    let builds = 0;
    const statement = fixedStatement<{ id: string; owner: string | null; ms: number }, unknown>(
      (slot) => {
        builds += 1;
        return sql`UPDATE t SET owner = ${slot.owner}, until = now() + ${slot.ms} * interval '1 ms'
          WHERE id = ${slot.id} AND (${slot.owner}::text IS NULL OR owner IS NULL)`;
      },
    );
    const { db, queries } = recordingDb();
    await statement(db, { id: 'a', owner: 'me', ms: 10 });
    await statement(db, { ms: 20, owner: null, id: 'b' });
    expect(builds).toBe(1);
    expect(queries.map((query) => query.sql)).toEqual([queries[0]?.sql, queries[0]?.sql]);
    expect(queries[0]?.sql.replace(/\s+/g, ' ')).toBe(
      "UPDATE t SET owner = $1, until = now() + $2 * interval '1 ms' WHERE id = $3 AND ($4::text IS NULL OR owner IS NULL)",
    );
    expect(queries.map((query) => query.parameters)).toEqual([
      ['me', 10, 'a', 'me'],
      [null, 20, 'b', null],
    ]);
  });

  it('refuses a statement with a value written into it instead of a slot', () => {
    expect(() =>
      fixedStatement<{ id: string }, unknown>(
        (slot) => sql`SELECT * FROM t WHERE id = ${slot.id} AND kind = ${'inlined'}`,
      ),
    ).toThrow(/a parameter that is not a slot: inlined/);
  });
});

describe('statementsByShape', () => {
  type Values = { id: string; owner: string | null };
  const build = (shape: { owned: boolean }, slot: { id: unknown; owner: unknown }) =>
    sql`UPDATE t SET owner = ${shape.owned ? sql`${slot.owner}` : sql`NULL`} WHERE id = ${slot.id}`;

  it('compiles each shape once, the first time it runs, and binds its values by name', async () => {
    const built: boolean[] = [];
    const statements = statementsByShape<{ owned: boolean }, Values, unknown>({
      key: (shape) => String(shape.owned),
      build: (shape, slot) => {
        built.push(shape.owned);
        return build(shape, slot);
      },
    });
    const { db, queries } = recordingDb();
    await statements(db, { owned: true }, { id: 'a', owner: 'me' });
    await statements(db, { owned: false }, { id: 'b', owner: 'unused' });
    await statements(db, { owned: true }, { owner: 'you', id: 'c' });
    expect(built).toEqual([true, false]);
    expect(queries.map((query) => query.sql)).toEqual([
      'UPDATE t SET owner = $1 WHERE id = $2',
      'UPDATE t SET owner = NULL WHERE id = $1',
      'UPDATE t SET owner = $1 WHERE id = $2',
    ]);
    expect(queries.map((query) => query.parameters)).toEqual([['me', 'a'], ['b'], ['you', 'c']]);
  });

  it('gives the same text and parameters as the build with parametersOf, compiled at each run', async () => {
    const statements = statementsByShape<{ owned: boolean }, Values, unknown>({
      key: (shape) => String(shape.owned),
      build,
    });
    const { db, queries } = recordingDb();
    const values = { id: 'a', owner: 'me' };
    await statements(db, { owned: true }, values);
    const compiled = build({ owned: true }, parametersOf(values)).compile(
      new Kysely<unknown>({ dialect: new PostgresDialect({ pool: {} as never }) }),
    );
    expect(compiled.sql).toBe(queries[0]?.sql);
    expect(compiled.parameters).toEqual(queries[0]?.parameters);
  });
});
