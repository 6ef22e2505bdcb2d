import type pg from 'pg';
import { type ForwardedQuery, SessionClient } from './session-client.js';

/**
 * Named prepared statements for the queries the pool's clients run: each
 * distinct statement text gets a name, each connection prepares it once,
 * and PostgreSQL then skips parsing it and, once its generic plan is as
 * cheap as the custom ones (after five runs), planning it too.
 *
 * Why: Waymark's writes are single statements with several CTEs (a turn's
 * row, its events, the NOTIFY), whose planning costs more than running
 * them. The turn write cost 610 µs of PostgreSQL CPU unnamed and 250 µs
 * prepared (embedded PostgreSQL 18, 2-core VM, 1,000 runs in a row), of
 * which parsing was ~30 µs and planning ~170 µs.
 *
 * Prepared statements are session state: a transaction-mode pooler
 * (PgBouncer before 1.21, or without `max_prepared_statements`) hands the
 * next statement to another server connection, which does not know the
 * name. So they are on only where config says so
 * (`DATABASE_PREPARED_STATEMENTS`; on by default with the embedded
 * PostgreSQL only).
 *
 * Only the promise-style `query(text, values)` calls with parameters are
 * named (kysely runs every query with parameters that way); callback-style
 * calls (the pool's own `pool.query`), query objects and statements without
 * parameters go through unnamed. Statements with more
 * than `maxParameters` parameters (the multi-row inserts, whose text
 * changes with their row count) stay unnamed, and at most `maxStatements`
 * texts get a name, so what each connection keeps prepared is bounded.
 * A text that starts with PLANNED_EACH_RUN stays unnamed too: its best plan
 * depends on its parameters and on the tables' sizes, which a generic plan
 * made once would not follow (a batch of transitions).
 */

/** The start of a statement that PostgreSQL is to plan at each run. */
export const PLANNED_EACH_RUN = '/* planned each run */';

export interface PreparedStatementsOptions {
  /** Distinct statement texts that get a name; later ones run unnamed. */
  maxStatements: number;
  /** Statements with more parameters run unnamed. */
  maxParameters: number;
}

/** Longer than any BEGIN / COMMIT / ROLLBACK statement kysely sends (with its options). */
const TRANSACTION_CONTROL_MAX_LENGTH = 64;

/** SQLSTATE of "cached plan must not change result type": a `*` statement after its table changed. */
const FEATURE_NOT_SUPPORTED = '0A000';

/**
 * A `pg.Client` class for `new pg.Pool({ Client })` that names statements
 * as described above. The names are shared by every client of the class
 * (one pool), so each text has one name however many connections prepare it.
 */
export function preparingClientClass(options: PreparedStatementsOptions): typeof SessionClient {
  const names = new Map<string, string>();
  let issued = 0;

  function nameOf(text: string): string | undefined {
    const known = names.get(text);
    if (known !== undefined || names.size >= options.maxStatements) return known;
    return issue(text);
  }

  /**
   * A new name for `text`. Also after a schema change (a rolling upgrade's
   * migration adding a column), when a prepared `SELECT *` / `RETURNING *`
   * fails once per connection: every connection then prepares it afresh.
   */
  function issue(text: string): string {
    const name = `waymark_${++issued}`;
    names.set(text, name);
    return name;
  }

  return class PreparingClient extends SessionClient {
    #inTransaction = false;

    override query(...args: ForwardedQuery[]): ForwardedQuery {
      const [text, values, callback] = args;
      if (typeof text !== 'string') return super.query(...(args as [string]));
      this.#track(text);
      // Without parameters pg uses the simple protocol, which also runs
      // several commands in one text (migrations): those stay as they are.
      const parameters: unknown[] = Array.isArray(values) ? values : [];
      const named =
        callback === undefined &&
        parameters.length > 0 &&
        parameters.length <= options.maxParameters &&
        !text.startsWith(PLANNED_EACH_RUN);
      const name = named ? nameOf(text) : undefined;
      if (name === undefined) return super.query(...(args as [string]));
      const run = (as: string) =>
        super.query({ name: as, text, values: parameters }) as Promise<pg.QueryResult>;
      return run(name).catch((error: unknown) => {
        if (isStatementOfOtherSession(error)) throw explainPooler(error);
        if (!isStalePlan(error)) throw error;
        const renewed = issue(text);
        // Inside a transaction the failure has aborted it: only its owner
        // can start again (database.ts inTransaction does).
        if (this.#inTransaction) throw error;
        return run(renewed);
      });
    }

    /**
     * Follows BEGIN / COMMIT / ROLLBACK (kysely's own short statements) to
     * know whether a retry is safe; longer texts are never one of them and
     * are not scanned (trimming each 3 KB statement cost ~14 µs a workflow).
     */
    #track(text: string): void {
      if (text.length > TRANSACTION_CONTROL_MAX_LENGTH) return;
      const head = text.trimStart().slice(0, 8).toLowerCase();
      if (head.startsWith('begin') || head.startsWith('start')) this.#inTransaction = true;
      else if (head.startsWith('commit') || head.startsWith('rollback') || head.startsWith('end'))
        this.#inTransaction = false;
    }
  };
}

/** A prepared `*` statement whose table changed: renamed already, it runs afresh when sent again. */
export function isStalePlan(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error as { code?: unknown }).code === FEATURE_NOT_SUPPORTED &&
    error.message.includes('cached plan must not change result type')
  );
}

/** SQLSTATEs of a name unknown (26000) or taken (42P05) on the server session the statement reached. */
const OTHER_SESSION_CODES = ['26000', '42P05'];

/**
 * A named statement that met a server session other than the one that
 * prepared it, or one another client prepared it on: DATABASE_URL goes
 * through a pooler that shares server sessions between clients.
 */
function isStatementOfOtherSession(error: unknown): error is Error {
  return (
    error instanceof Error &&
    OTHER_SESSION_CODES.includes(String((error as { code?: unknown }).code)) &&
    /prepared statement "waymark_\d+"/.test(error.message)
  );
}

/** The error as PostgreSQL raised it (its class and code kept), saying which setting to change. */
function explainPooler(error: Error): Error {
  error.message +=
    ' (DATABASE_PREPARED_STATEMENTS is on, but the statement reached a server session that did ' +
    'not prepare it: DATABASE_URL goes through a transaction-mode pooler that does not keep ' +
    'prepared statements; set DATABASE_PREPARED_STATEMENTS=off, or use PgBouncer 1.21+ with ' +
    'max_prepared_statements)';
  return error;
}
