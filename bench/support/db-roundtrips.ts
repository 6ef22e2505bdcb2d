import pg from 'pg';

/**
 * Counts Postgres round trips in this process, by statement kind.
 *
 * Method: `pg.Client.prototype.query` is wrapped for the duration of the
 * benchmark. Every statement node-postgres sends goes through it: kysely's
 * pooled connections, raw `pool.query` (which calls it on a checked-out
 * client) and the event hub's own LISTEN connection. One call is one round
 * trip: pg sends Parse/Bind/Execute/Sync (or a simple Query) and waits for
 * ReadyForQuery, so BEGIN and COMMIT count as one each, as they cost one.
 * Notifications arriving on the LISTEN connection are pushed by the server
 * and are not counted. Everything the process sends while counting is
 * counted, background work included (lease renewals, reclaim polls, the
 * usage ledger's batched flushes), so the per-workflow figure is amortised
 * over the workflows that ran meanwhile.
 *
 * Time is measured from the call to its settlement (the round trip plus
 * waiting for the event loop to see the answer), summed per kind.
 */

export interface StatementCount {
  kind: string;
  calls: number;
  totalMs: number;
  /** The first statement of this kind, whitespace collapsed, for `--show-sql`. */
  example: string;
}

export interface RoundTripCounter {
  /** Counts from zero from now on. */
  reset(): void;
  /** What was counted since the last reset, most frequent first. */
  snapshot(): StatementCount[];
  /** Puts the original query method back. */
  restore(): void;
}

// pg's query has a dozen overloads; the wrapper forwards whatever it gets untouched.
type QueryMethod = (this: pg.Client, ...args: unknown[]) => unknown;

export function countRoundTrips(): RoundTripCounter {
  const prototype = pg.Client.prototype as unknown as { query: QueryMethod };
  const original = prototype.query;
  let counts = new Map<string, StatementCount>();
  // kysely sends the same parameterised texts again and again: classify each once,
  // so the counting costs a map lookup per statement, not a few regexes.
  const kinds = new Map<string, string>();

  const kindOf = (sql: string): string => {
    let kind = kinds.get(sql);
    if (kind === undefined) {
      kind = statementKind(sql);
      kinds.set(sql, kind);
    }
    return kind;
  };

  const record = (kind: string, sql: string, startedAt: number) => {
    const count = counts.get(kind) ?? { kind, calls: 0, totalMs: 0, example: oneLine(sql) };
    count.calls += 1;
    count.totalMs += performance.now() - startedAt;
    counts.set(kind, count);
  };

  prototype.query = function countedQuery(this: pg.Client, ...args: unknown[]): unknown {
    const sql = textOf(args[0]);
    const kind = kindOf(sql);
    const startedAt = performance.now();
    const last = args.length - 1;
    const callback = args[last];
    if (typeof callback === 'function') {
      // The callback form (pool.query uses it): time until the callback runs.
      args[last] = (...results: unknown[]) => {
        record(kind, sql, startedAt);
        return (callback as (...results: unknown[]) => unknown)(...results);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args);
    if (result instanceof Promise) {
      void result.then(
        () => record(kind, sql, startedAt),
        () => record(kind, sql, startedAt),
      );
    } else {
      // A submittable (cursor, stream): counted, not timed.
      record(kind, sql, startedAt);
    }
    return result;
  };

  return {
    reset() {
      counts = new Map();
    },
    snapshot: () => [...counts.values()].sort((a, b) => b.calls - a.calls),
    restore() {
      prototype.query = original;
    },
  };
}

function oneLine(sql: string): string {
  return sql.replace(/\s+/g, ' ').trim();
}

function textOf(query: unknown): string {
  if (typeof query === 'string') return query;
  const text = (query as { text?: unknown } | null)?.text;
  return typeof text === 'string' ? text : '(submittable)';
}

/**
 * A short name for a statement: its verb, the table it works on and what
 * singles it out (the columns an UPDATE sets, a locking clause, RETURNING),
 * e.g. `UPDATE workflows SET last_seq, updated_at RETURNING`,
 * `SELECT workflows FOR UPDATE`, `BEGIN`.
 */
export function statementKind(sql: string): string {
  const text = oneLine(sql).replace(/"/g, '');
  const verb = /^\w+/.exec(text)?.[0]?.toUpperCase() ?? '?';
  const table = (pattern: RegExp) => pattern.exec(text)?.[1] ?? '?';
  const locking = / for update skip locked/i.test(text)
    ? ' FOR UPDATE SKIP LOCKED'
    : / for update/i.test(text)
      ? ' FOR UPDATE'
      : '';
  const returning = / returning /i.test(text) ? ' RETURNING' : '';
  switch (verb) {
    case 'SELECT': {
      const call = /^select (\w+)\(/i.exec(text)?.[1];
      if (call) return `SELECT ${call}()`;
      const from = / from (\w+)/i.exec(text)?.[1];
      // No table: a health check such as `SELECT 1`, shown as it is.
      if (!from) return text.length > 60 ? `${text.slice(0, 57)}…` : text;
      return `SELECT ${from}${locking}`;
    }
    case 'INSERT':
      return `INSERT ${table(/^insert into (\w+)/i)}${
        / on conflict /i.test(text) ? ' ON CONFLICT' : ''
      }${returning}`;
    case 'UPDATE': {
      const assignments = / set (.*?)(?: where | returning |$)/i.exec(text)?.[1] ?? '';
      const columns = [...assignments.matchAll(/(?:^|, )(\w+) =/g)].map((match) => match[1]);
      return `UPDATE ${table(/^update (\w+)/i)} SET ${columns.join(', ')}${returning}`;
    }
    case 'DELETE':
      return `DELETE ${table(/^delete from (\w+)/i)}${returning}`;
    default: {
      const short = text.length > 60 ? `${text.slice(0, 57)}…` : text;
      // BEGIN, COMMIT, LISTEN …: the verb in capitals, as kysely sends them in lower case.
      return short.replace(/^\w+/, verb);
    }
  }
}
