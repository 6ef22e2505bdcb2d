import { type CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { Database } from '../../src/store/schema.js';

/**
 * The plans PostgreSQL runs a statement with, and what they read: for
 * tests that a statement reads its rows through an index, and no more of
 * them than it needs, on a table with statistics.
 */

/**
 * The first statement `run` makes through the database it is given,
 * captured as it runs, in a transaction rolled back after it (a write
 * changes nothing).
 */
export async function statementOf(
  pool: pg.Pool,
  run: (db: Kysely<Database>) => Promise<unknown>,
): Promise<CompiledQuery> {
  let statement: CompiledQuery | undefined;
  const capturing = new Kysely<Database>({
    dialect: new PostgresDialect({ pool }),
    log(event) {
      if (event.level === 'query' && !/^(begin|commit|rollback)\b/i.test(event.query.sql))
        statement ??= event.query;
    },
  });
  const rolledBack = new Error('rolled back');
  await capturing
    .transaction()
    .execute(async (tx) => {
      await run(tx);
      throw rolledBack;
    })
    .catch((error: unknown) => {
      if (error !== rolledBack) throw error;
    });
  if (!statement) throw new Error('no statement was made');
  return statement;
}

export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

/** What a plan read of one table. */
export interface TableReads {
  /** The indexes it read the table through, and `Seq Scan` for each scan of the whole table. */
  indexes: string[];
  /** Rows it read from the table, those its filters removed included, in every loop. */
  rowsRead: number;
}

/**
 * What `plan` read of `table`. A bitmap index scan does not name its
 * table: it counts when its index's name begins with the table's (the
 * schema's naming).
 */
export function readsOf(plan: PlanNode, table: string): TableReads {
  const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
  const all = nodes(plan);
  // Scans only: an UPDATE's or DELETE's node names its table too.
  const scans = all.filter(
    (node) => node['Relation Name'] === table && node['Node Type'].includes('Scan'),
  );
  const ofTable = (node: PlanNode) =>
    scans.includes(node) ||
    (node['Node Type'] === 'Bitmap Index Scan' && node['Index Name']?.startsWith(`${table}_`));
  return {
    indexes: all.flatMap((node) => {
      if (!ofTable(node)) return [];
      if (node['Index Name']) return [node['Index Name']];
      return node['Node Type'] === 'Seq Scan' ? ['Seq Scan'] : [];
    }),
    rowsRead: scans.reduce(
      (sum, scan) =>
        sum +
        (scan['Actual Rows'] +
          (scan['Rows Removed by Filter'] ?? 0) +
          (scan['Rows Removed by Index Recheck'] ?? 0)) *
          scan['Actual Loops'],
      0,
    ),
  };
}

/**
 * `statement` run by EXPLAIN ANALYZE in a transaction that is rolled back
 * (so a write changes nothing), twice: with its custom plan, as a
 * statement run unnamed is planned for its values (DATABASE_URL's
 * default), and with the generic plan a prepared statement settles on
 * after its first five runs (the embedded PostgreSQL's).
 */
export async function customAndGenericPlans(
  pool: pg.Pool,
  statement: CompiledQuery,
): Promise<{ custom: PlanNode; generic: PlanNode }> {
  const client = await pool.connect();
  const explained = async (text: string, values: unknown[] = []) => {
    const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
      values,
    );
    const plan = rows[0]?.['QUERY PLAN'][0].Plan;
    if (!plan) throw new Error(`no plan for ${text}`);
    return plan;
  };
  try {
    await client.query('BEGIN');
    const custom = await explained(statement.sql, [...statement.parameters]);
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
    await client.query(`PREPARE planned AS ${statement.sql}`);
    const values = statement.parameters.map((value) => client.escapeLiteral(textOf(value)));
    const generic = await explained(`EXECUTE planned(${values.join(', ')})`);
    await client.query('ROLLBACK');
    return { custom, generic };
  } finally {
    // The connection goes back to the pool as it came: out of any transaction, and
    // without the prepared statement, which outlives one.
    await client.query('ROLLBACK').catch(() => undefined);
    await client.query('DEALLOCATE planned').catch(() => undefined);
    client.release();
  }
}

/** A parameter as the text PostgreSQL reads it from: a string, a number, a time, or an array of them. */
function textOf(value: unknown): string {
  if (Array.isArray(value)) {
    return `{${value.map((item) => `"${String(item).replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
  }
  if (typeof value === 'string' || typeof value === 'number') return String(value);
  if (value instanceof Date) return value.toISOString();
  throw new Error(`no text for the parameter ${String(value)}`);
}
