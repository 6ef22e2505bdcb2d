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
 * (workflows/transitions.ts) has parts a transition leaves out: it is
 * compiled once per shape (`statementsByShape`), each shape's text the one
 * kysely built at each run before.
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
  return (db, values) => execute(db, compiled, values);
}

/**
 * Statements whose text depends on a few choices (their shape) and on
 * nothing else: each shape's text is compiled the first time it runs and
 * kept, and a run passes its values, as with `fixedStatement`. `key` names
 * a shape (its choices as a short string); the shapes must be few, a
 * handful of flags, since every one seen stays compiled.
 */
export function statementsByShape<Shape, Values extends Record<string, unknown>, Row>(options: {
  key: (shape: Shape) => string;
  build: (shape: Shape, slots: Slots<Values>) => RawBuilder<Row>;
}): (db: DbOrTx, shape: Shape, values: Values) => Promise<QueryResult<Row>> {
  const compiled = new Map<string, Compiled<Values>>();
  return (db, shape, values) => {
    const key = options.key(shape);
    let statement = compiled.get(key);
    if (statement === undefined) {
      statement = compile<Values, Row>((slots) => options.build(shape, slots));
      compiled.set(key, statement);
    }
    return execute(db, statement, values);
  };
}

/** A compiled statement run with `values` in its parameters' order. */
function execute<Values extends Record<string, unknown>, Row>(
  db: DbOrTx,
  statement: Compiled<Values>,
  values: Values,
): Promise<QueryResult<Row>> {
  const parameters = statement.order.map((name) => values[name]);
  return db.executeQuery(CompiledQuery.raw(statement.sql, parameters) as CompiledQuery<Row>);
}

/**
 * The values as ordinary parameters, in place of slots: for a statement
 * built by a fixed statement's `build` with parts that carry values of
 * their own, built and compiled at each run instead.
 */
export function parametersOf<Values extends Record<string, unknown>>(
  values: Values,
): Slots<Values> {
  return new Proxy({} as Slots<Values>, {
    get(_target, name) {
      return typeof name === 'string' ? sql`${values[name]}` : undefined;
    },
  });
}

/** A statement's text, and the name of the value each of its parameters is, in order. */
interface Compiled<Values> {
  sql: string;
  order: (keyof Values)[];
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
): Compiled<Values> {
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
