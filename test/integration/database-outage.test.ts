import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestAppOn, type TestApp } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

/** The app over a database reached through a proxy whose link the tests cut. */

let database: TestDatabase;
let proxy: TcpProxy;
let replica: TestApp;
let adminKey: string;

beforeAll(async () => {
  database = await createTestDatabase();
  const url = new URL(database.url);
  proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
  replica = await startTestAppOn({ ...database, url: proxy.through(database.url) });
  const created = await replica.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
});
afterAll(async () => {
  await proxy?.restore().catch(() => undefined);
  await replica?.close();
  await proxy?.close();
  await database?.drop();
});

function listWorkflows() {
  return replica.app.inject({ method: 'GET', url: '/v1/workflows', headers: bearer(adminKey) });
}

describe('the database out of reach', () => {
  it('requests get 503 database_unavailable with Retry-After, not a 500; once it is back they succeed', async () => {
    expect((await listWorkflows()).statusCode).toBe(200);
    await proxy.cut();
    const response = await listWorkflows();
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('1');
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({
      status: 503,
      code: 'database_unavailable',
      detail: 'The database is unavailable',
    });
    await proxy.restore();
    await expect.poll(async () => (await listWorkflows()).statusCode, { timeout: 5000 }).toBe(200);
  });
});
