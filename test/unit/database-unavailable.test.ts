import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isDatabaseUnavailable, isStatementGivenUp } from '../../src/store/database.js';

function databaseError(code: string, message = 'from PostgreSQL'): pg.DatabaseError {
  const error = new pg.DatabaseError(message, 0, 'error');
  error.code = code;
  return error;
}

function socketError(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`connect ${code} 127.0.0.1:5432`), { code });
}

describe('isDatabaseUnavailable', () => {
  it('a connection that cannot be had or is gone: unavailable', () => {
    for (const error of [
      databaseError('08006'),
      databaseError('57P01'),
      databaseError('57P03'),
      databaseError('53300'),
      socketError('ECONNREFUSED'),
      socketError('ECONNRESET'),
      new Error('timeout exceeded when trying to connect'),
      new Error('Connection terminated unexpectedly'),
      // PgBouncer's refusals for now, each a FATAL 08P01 (the first two as PgBouncer 1.18 sends them).
      databaseError('08P01', 'query_wait_timeout'),
      databaseError('08P01', 'no more connections allowed (max_client_conn)'),
      databaseError('08P01', 'pgbouncer cannot connect to server'),
      databaseError('08P01', 'server login has been failing, try again later (server_login_retry)'),
      databaseError('08P01', 'server conn crashed?'),
    ]) {
      expect(
        isDatabaseUnavailable(error),
        `${(error as { code?: string }).code} ${error.message}`,
      ).toBe(true);
    }
  });

  it('what PostgreSQL refuses, and everything else: not unavailable', () => {
    for (const error of [
      databaseError('23505'),
      databaseError('08P01'),
      databaseError('08P01', 'invalid frontend message type 0'),
      // Only a pooler's own word: the same text under another code is PostgreSQL's.
      databaseError('XX000', 'query_wait_timeout'),
      databaseError('57P04'),
      databaseError('57014'),
      databaseError('40001'),
      new Error('Connection terminated'),
      new TypeError('x is not a function'),
      'a string',
      undefined,
    ]) {
      expect(isDatabaseUnavailable(error), String(error)).toBe(false);
    }
  });
});

describe('isStatementGivenUp', () => {
  it('a statement PostgreSQL gave up on for the moment: a lock wait, a deadlock, a cancel, no disk or memory', () => {
    for (const code of ['40001', '40P01', '55P03', '57014', '53100', '53200']) {
      expect(isStatementGivenUp(databaseError(code)), code).toBe(true);
    }
  });

  it('values refused, a lost connection, and everything else: not given up', () => {
    for (const error of [
      databaseError('23505'),
      databaseError('22003'),
      databaseError('42P01'),
      databaseError('08006'),
      databaseError('57P01'),
      socketError('ECONNRESET'),
      new Error('canceling statement due to lock timeout'),
      undefined,
    ]) {
      expect(isStatementGivenUp(error), String(error)).toBe(false);
    }
  });
});
