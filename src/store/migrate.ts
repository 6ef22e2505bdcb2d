import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Pool, PoolClient } from 'pg';
import type { Logger } from 'pino';

/** The folder of numbered SQL migrations shipped with the service. */
export const migrationsDir = fileURLToPath(new URL('../../migrations/', import.meta.url));

export interface Migration {
  id: number;
  name: string;
  sql: string;
  checksum: string;
}

/** Reads `NNNN_name.sql` files in order; any other file name is an error, not silently skipped. */
export async function readMigrations(dir: string = migrationsDir): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((file) => !file.startsWith('.')).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = /^(\d{4})_([a-z0-9_]+)\.sql$/.exec(file);
    if (!match) throw new Error(`migration file name must look like 0001_name.sql: ${file}`);
    const id = Number(match[1]);
    if (id !== migrations.length + 1) {
      throw new Error(`migrations must be numbered 1, 2, 3... without gaps; found ${file}`);
    }
    const sql = await readFile(path.join(dir, file), 'utf8');
    const checksum = createHash('sha256').update(sql).digest('hex');
    migrations.push({ id, name: file, sql, checksum });
  }
  return migrations;
}

/**
 * Arbitrary but fixed key of the advisory lock that serialises migrations
 * across replicas ("waymark" as ASCII, truncated to fit a bigint).
 */
const MIGRATION_LOCK_KEY = 0x7761796d61726bn;

export class MigrationStateError extends Error {
  override name = 'MigrationStateError';
}

export interface MigrationResult {
  applied: string[];
  current: number;
}

/**
 * Applies pending migrations in one transaction under a transaction-level
 * advisory lock. Transaction-level (not session-level) so it also works
 * through a transaction-mode pooler such as PgBouncer; one transaction so
 * that a failed migration leaves nothing half-applied. Replicas starting
 * together queue on the lock and find the work done.
 *
 * Refuses a database that carries a migration this build does not know, or
 * whose applied migration differs from the file (migrations are frozen),
 * and one whose transactions do not default to READ COMMITTED
 * (checkIsolation).
 *
 * `signal` gives up: a process stopped while it waits for another
 * replica's lock (which may be held for as long as its migrations take)
 * drops its connection, which rolls the transaction back, rather than
 * wait on.
 */
export async function migrate(
  pool: Pool,
  log: Logger,
  options: { migrations?: Migration[]; signal?: AbortSignal } = {},
): Promise<MigrationResult> {
  const known = options.migrations ?? (await readMigrations());
  const client = await pool.connect();
  const { signal } = options;
  let dropped = false;
  const drop = () => {
    dropped = true;
    client.release(new Error('the migration was given up'));
  };
  if (signal?.aborted) drop();
  else signal?.addEventListener('abort', drop, { once: true });
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
    await checkIsolation(client);
    await client.query(`CREATE TABLE IF NOT EXISTS waymark_migrations (
      id integer PRIMARY KEY,
      name text NOT NULL,
      checksum text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const applied = await appliedMigrations(client);
    checkAppliedAgainstKnown(applied, known);
    const pending = known.filter((migration) => !applied.has(migration.id));
    for (const migration of pending) {
      log.info({ migration: migration.name }, 'applying migration');
      await client.query(migration.sql);
      await client.query(
        'INSERT INTO waymark_migrations (id, name, checksum) VALUES ($1, $2, $3)',
        [migration.id, migration.name, migration.checksum],
      );
    }
    await client.query('COMMIT');
    return { applied: pending.map((m) => m.name), current: known.length };
  } catch (error) {
    if (dropped)
      throw new Error('the migration was given up: the process is stopping', { cause: error });
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      log.error({ err: rollbackError }, 'rollback after a failed migration failed too');
    });
    throw error;
  } finally {
    signal?.removeEventListener('abort', drop);
    if (!dropped) client.release();
  }
}

/**
 * True when the database has every migration this build knows (for
 * /readyz), newer ones besides included. A newer release's first replica
 * migrates the database while this release's replicas still run: they go
 * on working beside it (migrations only add, and what one release writes
 * the other reads) until they are replaced, so they stay ready rather than
 * all leave the load balancer at once. Only a restart refuses such a
 * database (`migrate`).
 */
export async function migrationsAreCurrent(pool: Pool, known: Migration[]): Promise<boolean> {
  const table = await pool.query<{ exists: boolean }>(
    "SELECT to_regclass('waymark_migrations') IS NOT NULL AS exists",
  );
  if (!table.rows[0]?.exists) return false;
  const { rows } = await pool.query<{ count: string }>(
    'SELECT count(*) AS count FROM waymark_migrations WHERE id <= $1',
    [known.length],
  );
  return Number(rows[0]?.count ?? 0) === known.length;
}

/**
 * Waymark's single-statement writes rely on READ COMMITTED: a statement
 * that waited for a row lock (a session's row as its exchanges are
 * appended, a workflow's as replicas take it over) goes on with the row as
 * the other transaction committed it. Under REPEATABLE READ or
 * SERIALIZABLE the same wait ends in a serialization failure, so with
 * either as the database's or the role's default, workflows would fail at
 * random under load. Refused at start instead, saying what to change.
 */
async function checkIsolation(client: PoolClient): Promise<void> {
  const { rows } = await client.query<{ isolation: string }>(
    "SELECT current_setting('transaction_isolation') AS isolation",
  );
  const isolation = rows[0]?.isolation;
  if (isolation === 'read committed') return;
  throw new MigrationStateError(
    `the database's transactions default to ${isolation} isolation; Waymark needs read committed ` +
      '(the PostgreSQL default): reset default_transaction_isolation for its database and role, ' +
      "e.g. ALTER DATABASE <name> SET default_transaction_isolation = 'read committed'",
  );
}

async function appliedMigrations(
  client: PoolClient,
): Promise<Map<number, { name: string; checksum: string }>> {
  const { rows } = await client.query<{ id: number; name: string; checksum: string }>(
    'SELECT id, name, checksum FROM waymark_migrations ORDER BY id',
  );
  return new Map(rows.map((row) => [row.id, { name: row.name, checksum: row.checksum }]));
}

function checkAppliedAgainstKnown(
  applied: Map<number, { name: string; checksum: string }>,
  known: Migration[],
): void {
  for (const [id, row] of applied) {
    const migration = known[id - 1];
    if (!migration) {
      throw new MigrationStateError(
        `the database carries migration ${row.name}, which this build of Waymark does not know; ` +
          'it was migrated by a newer version, so run that version (or newer)',
      );
    }
    if (migration.checksum !== row.checksum) {
      throw new MigrationStateError(
        `migration ${row.name} differs from the one applied to the database; ` +
          'migrations are frozen once applied, add a new one instead',
      );
    }
  }
}
