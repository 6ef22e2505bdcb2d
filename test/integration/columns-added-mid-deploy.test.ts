import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import {
  answerToEnd,
  bootstrapOperator,
  createTenant,
  getWorkflow,
  scriptedCatalogue,
  startWorkflow,
  waitFor,
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
 * Every table gains a column, as a release may add one to any.
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
  // A question for the user (the scripted model asks about a vague request), answered.
  const asking = await startWorkflow(testApp, tenant.key, { input: 'help', sessionId });
  const waiting = await waitForStatus(testApp, tenant.key, asking, ['awaiting_input', 'failed']);
  expect(waiting.status, JSON.stringify(waiting)).toBe('awaiting_input');
  const answered = await answerToEnd(testApp, tenant.key, {
    id: asking,
    answer: 'the museum',
    version: waiting.version,
  });
  expect(answered.status, JSON.stringify(answered)).toBe('completed');
  // A pipeline, continued at each of its checkpoints.
  const complex = await startWorkflow(testApp, tenant.key, {
    input: 'Compare the populations of France and Spain, then make a summary table',
    sessionId,
  });
  for (let checkpoint = 0; ; checkpoint++) {
    const state = await waitForStatus(testApp, tenant.key, complex, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    if (state.status !== 'awaiting_input') {
      expect(state.status, JSON.stringify(state)).toBe('completed');
      break;
    }
    expect(checkpoint).toBeLessThan(5);
    const continued = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${complex}/continue`,
      headers: bearer(tenant.key),
      payload: { version: state.version },
    });
    expect(continued.statusCode, continued.body).toBe(202);
    await waitFor(async () => {
      const now = await getWorkflow(testApp, tenant.key, complex);
      return now.version > state.version + 1 || now.status !== 'awaiting_input' ? now : undefined;
    }, 'the pipeline to go on');
  }
  const deleted = await testApp.app.inject({
    method: 'DELETE',
    url: `/v1/sessions/${sessionId}`,
    headers: bearer(tenant.key),
  });
  expect(deleted.statusCode, deleted.body).toBe(204);
}

describe('columns a newer release adds while this replica runs', () => {
  it('tenants, keys, tools, sessions, a tool loop, a question answered and a pipeline continued all still work, on a connection that prepared their statements before', async () => {
    await writeRound(1);
    // Every table of the schema gains a column.
    const { rows: tables } = await testApp.services.database.pool.query<{ name: string }>(
      "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'",
    );
    expect(tables.map((table) => table.name)).toEqual(
      expect.arrayContaining(['tenants', 'http_tools', 'workflows', 'workflow_events']),
    );
    await migrateElsewhere(
      tables.map((table) => `ALTER TABLE "${table.name}" ADD COLUMN added_by_a_newer_release text`),
    );
    await writeRound(2);
    const { rows } = await testApp.services.database.pool.query<{ name: string }>(
      "SELECT name FROM tenants WHERE name LIKE 'renamed-%' ORDER BY name",
    );
    expect(rows.map((row) => row.name)).toEqual(['renamed-1', 'renamed-2']);
  });
});
