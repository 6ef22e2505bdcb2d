import pg from 'pg';

/**
 * A PostgreSQL error that ends the session rather than the statement: a
 * connection exception (class 08), or the backend or the server shutting
 * down, crashed or starting (57P01-57P05). What the session was doing
 * when it ended, a commit among others, is unknown. Told by SQLSTATE,
 * since the severity is in the server's language.
 */
export function endsSession(error: pg.DatabaseError): boolean {
  const code = error.code ?? '';
  return code.startsWith('08') || code.startsWith('57P');
}

// biome-ignore lint/suspicious/noExplicitAny: pg.Client's query has a dozen overloads; the override passes on whatever it gets.
export type ForwardedQuery = any; // any: what pg.Client's overloaded query takes and returns, passed on as it is

/**
 * The pool's client: one whose statement failed with an error that ends
 * its session (its backend terminated, the server shutting down) ends
 * itself at once, so the pool drops it when it is released. PostgreSQL
 * sends that error just before it closes the connection; released in
 * between, the client went back to the pool as idle, and the next
 * statement handed it failed too ("Connection terminated unexpectedly"):
 * a run whose connection was terminated could then not hand its workflow
 * over, which waited for its lease to expire instead.
 */
export class SessionClient extends pg.Client {
  override query(...args: ForwardedQuery[]): ForwardedQuery {
    const result = super.query(...(args as [string]));
    if (!(result instanceof Promise)) return result;
    return result.catch((error: unknown) => {
      if (error instanceof pg.DatabaseError && endsSession(error)) {
        // Its own 'error' listener (database.ts) reports what the connection does next.
        this.end().catch(() => undefined);
      }
      throw error;
    });
  }
}
