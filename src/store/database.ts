import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { Logger } from 'pino';
import {
  isStalePlan,
  type PreparedStatementsOptions,
  preparingClientClass,
} from './prepared-statements.js';
import type { Database } from './schema.js';
import { SessionClient } from './session-client.js';

export type Db = Kysely<Database>;
/** Repositories take either; the caller owns the transaction. */
export type DbOrTx = Kysely<Database> | Transaction<Database>;

/**
 * A one-row FROM item that turns off the wait for the WAL flush for the
 * statement's own transaction (SET LOCAL, so it works through a
 * transaction-mode pooler). For writes whose loss in a PostgreSQL crash
 * only means a step runs again or an event is missing at the end of the
 * log: commits are lost as a suffix, never with a gap, and the next durable
 * commit flushes them. It saves the flush's wait on every such commit:
 * ~0.1-0.15 ms on the development VM's disk (pg_test_fsync: ~0.1 ms per
 * flush; a turn's write 0.64 vs 0.80 ms in a loop), milliseconds on slower
 * disks.
 */
export const WITHOUT_FLUSH_WAIT = sql`(SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode`;

export interface DatabaseHandle {
  db: Db;
  pool: pg.Pool;
  /** Ends every pooled connection. */
  close(): Promise<void>;
}

/** Named prepared statements (prepared-statements.ts): how many texts, with how many parameters at most. */
const PREPARED_STATEMENTS: PreparedStatementsOptions = { maxStatements: 200, maxParameters: 64 };

export function openDatabase(options: {
  url: string;
  poolMax: number;
  log: Logger;
  /** Runs statements as named prepared statements; not through a transaction-mode pooler that lacks them. */
  preparedStatements?: boolean;
  /**
   * The connections' `application_name`: a replica's own, by which it tells
   * its connections from the others' (tracker/listen-connection.ts). One in
   * the URL wins.
   */
  applicationName?: string;
}): DatabaseHandle {
  const pool = new pg.Pool({
    connectionString: options.url,
    application_name: options.applicationName,
    max: options.poolMax,
    Client: options.preparedStatements ? preparingClientClass(PREPARED_STATEMENTS) : SessionClient,
    // A request waits at most this long for a free connection, then fails
    // with a 503 (isDatabaseUnavailable) instead of hanging until the client
    // gives up.
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    // A database host that vanished without closing its connections (a
    // crash, a partition) is found by TCP keep-alive probes, and the
    // statements waiting on those connections fail, rather than waiting
    // until the kernel gives up on a write, or forever on a read.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  });
  // A connection lost (a database restart, a failover, its backend
  // terminated) emits 'error' on its client, idle or in use; without a
  // listener Node would crash the process. A query in flight on it has
  // failed with the error already, and the pool drops the client when it
  // is released. The pool passes an idle client's error on to its own
  // 'error', which needs a listener too: logged here once, by the client's.
  pool.on('connect', (client) => {
    client.on('error', (error) => {
      // Closing, the pool does not wait for its connections' ends, and an
      // embedded PostgreSQL stopping right after terminates those still open.
      if (pool.ending)
        options.log.debug({ err: error }, 'database connection lost as the pool closed');
      else options.log.warn({ err: error }, 'database connection lost');
    });
  });
  pool.on('error', () => undefined);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  let closed = false;
  return {
    db,
    pool,
    async close() {
      if (closed) return;
      closed = true;
      await db.destroy();
      // kysely ends the pool only if it ever ran a query itself; raw pool
      // users (migrations, readiness) would otherwise keep connections open.
      if (!pool.ended) await pool.end();
    },
  };
}

/** At most this many runs of one transaction that meets stale prepared statements (inTransaction). */
const STALE_PLAN_ATTEMPTS = 5;

/**
 * Runs `work` in one transaction, which every store transaction goes
 * through. With prepared statements on, a prepared `SELECT *` /
 * `RETURNING *` whose table has changed (a rolling upgrade: another
 * replica's migration added a column) fails once on each connection that
 * prepared it, and inside a transaction that aborts the transaction. The
 * statement has a new name by then, so the transaction runs again from
 * the start: once for each such statement it meets, at most
 * STALE_PLAN_ATTEMPTS times. So `work` may run more than once: it must
 * only touch the database through `tx`.
 */
export async function inTransaction<T>(
  db: Db,
  work: (tx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(work);
    } catch (error) {
      if (!isStalePlan(error) || attempt >= STALE_PLAN_ATTEMPTS) throw error;
    }
  }
}

/** What node-postgres and its pool say, in their messages only, when a connection cannot be had or is gone. */
const CONNECTION_LOST_MESSAGES = [
  'timeout exceeded when trying to connect',
  'Connection terminated unexpectedly',
  'Connection terminated due to connection timeout',
  'Client has encountered a connection error and is not queryable',
  // A client that ended itself after its session ended (session-client.ts), asked once more (a rollback).
  'Client was closed and is not queryable',
];

/** Socket errors of connecting to PostgreSQL or of a connection to it. */
const SOCKET_ERROR_CODES = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EPIPE',
];

/**
 * How a connection pooler in front of PostgreSQL (PgBouncer) says it could
 * not serve a statement for now: it answers with a FATAL 08P01 (the code it
 * gives nearly every refusal) and closes the connection. Messages as
 * PgBouncer words them, each the start of one: no server connection free
 * within query_wait_timeout (also what a client gets while the server is
 * down), too many clients, server logins failing, the server connection
 * lost under a transaction.
 */
const POOLER_UNAVAILABLE_MESSAGES = [
  'query_wait_timeout',
  'no more connections allowed',
  'pgbouncer cannot connect to server',
  'server login has been failing',
  'server conn crashed?',
];

/**
 * PostgreSQL refused the values themselves (SQLSTATE class 22, a data
 * exception such as a number out of range; class 23, a constraint): the
 * same write fails again however often it is retried.
 */
export function isValueRefused(error: unknown): boolean {
  return error instanceof pg.DatabaseError && /^2[23]/.test(error.code ?? '');
}

/**
 * SQLSTATEs of a statement PostgreSQL gave up on, or chose to abort, for
 * what other sessions or the server were doing at that moment: a
 * serialization failure (40001), a deadlock (40P01), a lock not had within
 * `lock_timeout` (55P03), a statement cancelled (57014: `statement_timeout`,
 * or an operator's `pg_cancel_backend`), the server out of disk or memory
 * (53100, 53200). Its transaction was rolled back; the same statement may
 * well succeed a moment later.
 */
const STATEMENT_GAVE_UP = ['40001', '40P01', '55P03', '57014', '53100', '53200'];

/** Whether PostgreSQL gave up on the statement for a passing reason (STATEMENT_GAVE_UP); nothing of it committed. */
export function isStatementGivenUp(error: unknown): boolean {
  return error instanceof pg.DatabaseError && STATEMENT_GAVE_UP.includes(error.code ?? '');
}

/** A statement cancelled (57014): it ran past `statement_timeout`, or an operator cancelled it. */
export function isStatementCancelled(error: unknown): boolean {
  return error instanceof pg.DatabaseError && error.code === '57014';
}

/**
 * Whether `error` says the database cannot be reached or went away, so the
 * same request may well succeed a moment later: no connection free within
 * the pool's wait, a connection refused or lost (class 08 but 08P01, a
 * protocol violation, which would only happen again), PostgreSQL shutting
 * down, crashed or starting (57P01-57P03), out of connection slots
 * (53300), or a pooler with no server connection to give
 * (POOLER_UNAVAILABLE_MESSAGES).
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (error instanceof pg.DatabaseError) {
    const code = error.code ?? '';
    if (code === '08P01') {
      return POOLER_UNAVAILABLE_MESSAGES.some((message) => error.message.startsWith(message));
    }
    return code.startsWith('08') || ['57P01', '57P02', '57P03', '53300'].includes(code);
  }
  if (!(error instanceof Error)) return false;
  const code = (error as NodeJS.ErrnoException).code;
  return (
    (code !== undefined && SOCKET_ERROR_CODES.includes(code)) ||
    CONNECTION_LOST_MESSAGES.includes(error.message)
  );
}
