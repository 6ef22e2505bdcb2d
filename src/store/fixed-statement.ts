import {
  CompiledQuery,
  createQueryId,
  PostgresQueryCompiler,
  type QueryResult,
  type RawBuilder,
  sql,
} from 'kysely';
import type { DbOrTx } from './database.js';

/**
 * A statement whose text is the same at every run, compiled by kysely once
 * (when the module defining it loads) rather than built and compiled again
 * at each run: a run passes only its values. For a workflow's insert,
 * building and compiling took 83 µs of the service thread at each create
 * (bench/simple-path at concurrency 1, 2026-12-02), and the fixed
 * statement took ~0.2 ms of CPU off each workflow. A transition's statement
 * (workflows/transitions.ts) took 41 µs to build, but has parts a
 * transition leaves out: fixed, with them as NULLs or one text per shape,
 * it saved ~0.06 ms a workflow, within the noise, and was not kept.
 *
 * `build` writes the statement with kysely's `sql`, each value through its
 * slot (`slots.name`, a parameter; one may appear more than once), so the
 * statement stays one readable piece of SQL. Nothing of the text may
 * depend on the values: what varies goes into a value (a NULL, a flag the
 * SQL tests) and the text reads it.
 */
export function fixedStatement<Values extends Record<string, unknown>, Row>(
  build: (slots: Slots<Values>) => RawBuilder<Row>,
): (db: DbOrTx, values: Values) => Promise<QueryResult<Row>> {
  const compiled = compile(build);
  return (db, values) => {
    const parameters = compiled.order.map((name) => values[name]);
    return db.executeQuery(CompiledQuery.raw(compiled.sql, parameters) as CompiledQuery<Row>);
  };
}

/** A placeholder for each value of a fixed statement, by name. */
export type Slots<Values> = { readonly [Name in keyof Values]: RawBuilder<Values[Name]> };

/**
 * The statement as kysely compiles it, with the name of the value each of
 * its parameters is: the slots are parameters whose values are markers,
 * found again among the compiled parameters.
 */
function compile<Values extends Record<string, unknown>, Row>(
  build: (slots: Slots<Values>) => RawBuilder<Row>,
): { sql: string; order: (keyof Values)[] } {
  const markers = new Map<unknown, keyof Values>();
  const slots = new Proxy({} as Slots<Values>, {
    get(_target, name) {
      if (typeof name !== 'string') return undefined;
      const marker = { slot: name };
      markers.set(marker, name);
      return sql`${marker}`;
    },
  });
  const query = new PostgresQueryCompiler().compileQuery(
    build(slots).toOperationNode(),
    createQueryId(),
  );
  const order = query.parameters.map((parameter) => {
    const name = markers.get(parameter);
    if (name === undefined) {
      throw new Error(`a fixed statement has a parameter that is not a slot: ${String(parameter)}`);
    }
    return name;
  });
  return { sql: query.sql, order };
}
