import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { lockWaiter } from '../support/database.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  type TestTenant,
} from '../support/workflows.js';

/**
 * A request whose statement PostgreSQL gives up on for the moment (here
 * it is cancelled while it waits for a row lock, as lock_timeout or
 * statement_timeout would end it during a migration) gets a 503 to retry,
 * not a 500.
 */

let testApp: TestApp;
let operatorKey: string;
let tenant: TestTenant;
let admin: pg.Client;

beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue() });
  operatorKey = await bootstrapOperator(testApp);
  tenant = await createTenant(testApp, operatorKey, { name: 'acme' });
  admin = new pg.Client({ connectionString: testApp.database.url });
  await admin.connect();
});
afterAll(async () => {
  await admin?.end();
  await testApp?.close();
});

function rename(name: string) {
  return testApp.app.inject({
    method: 'PATCH',
    url: `/v1/tenants/${tenant.id}`,
    headers: bearer(operatorKey),
    payload: { name },
  });
}

describe('a statement PostgreSQL gives up on', () => {
  it('answers 503 database_busy with Retry-After; the retry succeeds', async () => {
    const lock = new pg.Client({ connectionString: testApp.database.url });
    await lock.connect();
    try {
      await lock.query('BEGIN');
      await lock.query('SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE', [tenant.id]);
      const pending = rename('acme-renamed');
      await admin.query('SELECT pg_cancel_backend($1)', [await lockWaiter(admin)]);
      const response = await pending;
      expect(response.statusCode, response.body).toBe(503);
      expect(response.headers['retry-after']).toBe('1');
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({ status: 503, code: 'database_busy' });
      await lock.query('ROLLBACK');
    } finally {
      await lock.end();
    }
    const { rows } = await admin.query<{ name: string }>('SELECT name FROM tenants WHERE id = $1', [
      tenant.id,
    ]);
    expect(rows[0]?.name).toBe('acme');
    const retried = await rename('acme-renamed');
    expect(retried.statusCode, retried.body).toBe(200);
    expect(retried.json()).toMatchObject({ name: 'acme-renamed' });
  });
});
