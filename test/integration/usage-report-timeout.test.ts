import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import { bootstrapOperator } from '../support/workflows.js';

/**
 * USAGE_REPORT_TIMEOUT_MS bounds a usage report's statement. The report is
 * made to wait for a lock on the ledger that another transaction holds,
 * which counts against the timeout as a long sum would; the timeout is its
 * transaction's own, so the pooled connection goes back without it.
 */

const TIMEOUT_MS = 100;

let testApp: TestApp;
let adminKey: string;

beforeAll(async () => {
  testApp = await startTestApp({ USAGE_REPORT_TIMEOUT_MS: String(TIMEOUT_MS) });
  adminKey = await bootstrapOperator(testApp);
});
afterAll(async () => testApp?.close());

function report() {
  return testApp.app.inject({ method: 'GET', url: '/v1/usage', headers: bearer(adminKey) });
}

describe('usage report timeout', () => {
  it('a report past USAGE_REPORT_TIMEOUT_MS gets 503 usage_report_timeout; the timeout stays with its transaction', async () => {
    const holder = await testApp.services.database.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE llm_calls IN ACCESS EXCLUSIVE MODE');
      const started = Date.now();
      const refused = await report();
      const body = expectProblem(refused, 503, 'usage_report_timeout');
      expect(body.detail).toContain(`${TIMEOUT_MS} ms`);
      expect(Date.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS);
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
    expect((await report()).statusCode).toBe(200);
    // Every pooled connection is back at the server's default.
    const { pool } = testApp.services.database;
    const connections = await Promise.all(Array.from({ length: 3 }, () => pool.connect()));
    try {
      for (const connection of connections) {
        const { rows } = await connection.query<{ statement_timeout: string }>(
          'SHOW statement_timeout',
        );
        expect(rows[0]?.statement_timeout).toBe('0');
      }
    } finally {
      for (const connection of connections) connection.release();
    }
  });
});
