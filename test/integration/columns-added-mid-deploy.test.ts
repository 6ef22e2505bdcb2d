import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  startWorkflow,
  waitForStatus,
} from '../support/workflows.js';

/**
 * A rolling upgrade: a newer release's migration adds columns to the
 * tables while this replica runs, its connections holding prepared
 * `SELECT *` / `RETURNING *` statements (on by default with the embedded
 * PostgreSQL). Each statement then fails once per connection with
 * "cached plan must not change result type", and inside a transaction
 * that aborts the transaction: the store runs it again
 * (database.ts inTransaction). One pooled connection, so every write
 * below meets the statements the round before the migration prepared.
 */

let testApp: TestApp;
let tools: ToolServer;
let operatorKey: string;

beforeAll(async () => {
  tools = await startToolServer();
  testApp = await startTestApp({
    WAYMARK_MODELS: scriptedCatalogue(),
    DATABASE_POOL_MAX: '1',
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
  });
  operatorKey = await bootstrapOperator(testApp);
});
afterAll(async () => {
  await testApp?.close();
  await tools?.close();
});

/** The newer release's migration, on a connection of its own. */
async function migrateElsewhere(statements: string[]): Promise<void> {
  const other = new pg.Client({ connectionString: testApp.database.url });
  await other.connect();
  try {
    for (const statement of statements) await other.query(statement);
  } finally {
    await other.end();
  }
}

const TABLES = ['tenants', 'api_keys', 'http_tools', 'sessions', 'workflows', 'workflow_events'];

/** Each write that runs in a transaction, through the API; every answer as it would be on a quiet day. */
async function writeRound(round: number): Promise<void> {
  const tenant = await createTenant(testApp, operatorKey, { name: `tenant-${round}` });
  const renamed = await testApp.app.inject({
    method: 'PATCH',
    url: `/v1/tenants/${tenant.id}`,
    headers: bearer(operatorKey),
    payload: { name: `renamed-${round}` },
  });
  expect(renamed.statusCode, renamed.body).toBe(200);
  const key = await testApp.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: bearer(tenant.key),
    payload: { name: `key-${round}` },
  });
  expect(key.statusCode, key.body).toBe(201);
  const tool = await testApp.app.inject({
    method: 'POST',
    url: '/v1/tools',
    headers: bearer(tenant.key),
    payload: {
      name: `echo_${randomUUID().slice(0, 8)}`,
      description: 'Echoes its arguments',
      parameters: { type: 'object', properties: {} },
      url: `${tools.origin}/echo`,
    },
  });
  expect(tool.statusCode, tool.body).toBe(201);
  const session = await testApp.app.inject({
    method: 'POST',
    url: '/v1/sessions',
    headers: bearer(tenant.key),
  });
  expect(session.statusCode, session.body).toBe(201);
  const sessionId = (session.json() as { id: string }).id;
  const id = await startWorkflow(testApp, tenant.key, { input: 'What is 2 + 2?', sessionId });
  const ended = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
  expect(ended.status, JSON.stringify(ended)).toBe('completed');
  const deleted = await testApp.app.inject({
    method: 'DELETE',
    url: `/v1/sessions/${sessionId}`,
    headers: bearer(tenant.key),
  });
  expect(deleted.statusCode, deleted.body).toBe(204);
}

describe('columns a newer release adds while this replica runs', () => {
  it('every transactional write still succeeds, on connections that prepared its statements before', async () => {
    await writeRound(1);
    await migrateElsewhere(
      TABLES.map((table) => `ALTER TABLE ${table} ADD COLUMN added_by_a_newer_release text`),
    );
    await writeRound(2);
    const { rows } = await testApp.services.database.pool.query<{ name: string }>(
      "SELECT name FROM tenants WHERE name LIKE 'renamed-%' ORDER BY name",
    );
    expect(rows.map((row) => row.name)).toEqual(['renamed-1', 'renamed-2']);
  });
});
