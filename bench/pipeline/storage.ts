import type pg from 'pg';

/**
 * What a workflow leaves in Postgres, read over the bench's own connection
 * (not the service's pool), between workflows.
 *
 * Row bytes (the headline): for each table a workflow writes, the sum of
 * `pg_column_size(t.*)` over the workflow's rows. That is the size of each
 * row as a tuple (a 24-byte header, then the column values as stored:
 * a value PostgreSQL compressed counts compressed, a TOASTed one at its
 * stored size), so it is exact for one workflow and independent of page
 * fill, dead tuples and other workflows. It leaves out what depends on
 * page layout: the 4-byte line pointer per row, alignment padding between
 * rows, and the index entries; the physical figure below shows how much
 * those add.
 *
 * Physical bytes: `pg_total_relation_size` (heap, TOAST, free space map and
 * every index) of the same tables, summed, after `VACUUM FULL` rewrote them
 * compactly; the difference around one workflow is that workflow's share
 * of the disk. Pages are 8 kB, so this is only meaningful for a large
 * workflow (the 200-stage one).
 *
 * WAL bytes: `pg_current_wal_insert_lsn()` before and after a workflow,
 * i.e. everything the server wrote to its log meanwhile (row images, index
 * entries, commit records, full-page images after a checkpoint): what a
 * replica or a backup receives. Only the bench runs, so it is all the
 * workflow's.
 */

/** Tables holding a workflow's own rows, and the column naming the workflow. */
export const WORKFLOW_TABLES = [
  { table: 'workflows', key: 'id' },
  { table: 'workflow_events', key: 'workflow_id' },
  { table: 'workflow_plans', key: 'workflow_id' },
  { table: 'workflow_stage_attempts', key: 'workflow_id' },
  { table: 'workflow_turns', key: 'workflow_id' },
] as const;

/**
 * The usage ledger: one row per model call, so it grows per stage too. It
 * is not one of the workflow's own tables (it outlives the workflow for
 * billing), so it is reported beside the total, not in it.
 */
export const LEDGER_TABLE = { table: 'llm_calls', key: 'workflow_id' } as const;

export interface TableBytes {
  table: string;
  rows: number;
  bytes: number;
}

/** Row bytes of one workflow per table, the workflow's own tables first, the ledger last. */
export async function rowBytes(client: pg.Client, workflowId: string): Promise<TableBytes[]> {
  const measured: TableBytes[] = [];
  for (const { table, key } of [...WORKFLOW_TABLES, LEDGER_TABLE]) {
    // Table and column names come from the constants above, never from input.
    const result = await client.query<{ rows: string; bytes: string }>(
      `SELECT count(*) AS rows, coalesce(sum(pg_column_size(t.*)), 0) AS bytes
       FROM ${table} t WHERE ${key} = $1`,
      [workflowId],
    );
    const row = result.rows[0];
    measured.push({ table, rows: Number(row?.rows ?? 0), bytes: Number(row?.bytes ?? 0) });
  }
  return measured;
}

/** The workflow's own tables' share of `measured` (the ledger left out). */
export function ownBytes(measured: TableBytes[]): number {
  return measured
    .filter((entry) => entry.table !== LEDGER_TABLE.table)
    .reduce((sum, entry) => sum + entry.bytes, 0);
}

/** Compacts the workflow tables, then sums their total relation sizes. */
export async function compactedRelationBytes(client: pg.Client): Promise<number> {
  const tables = WORKFLOW_TABLES.map((entry) => entry.table);
  await client.query(`VACUUM FULL ${tables.join(', ')}`);
  const result = await client.query<{ bytes: string }>(
    'SELECT sum(pg_total_relation_size(name::regclass)) AS bytes FROM unnest($1::text[]) AS name',
    [tables],
  );
  return Number(result.rows[0]?.bytes ?? 0);
}

/** The server's WAL insert position, as a byte offset. */
export async function walPosition(client: pg.Client): Promise<bigint> {
  const result = await client.query<{ at: string }>(
    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::text AS at",
  );
  return BigInt(result.rows[0]?.at ?? '0');
}
