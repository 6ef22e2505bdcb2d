import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAppOn, type TestApp } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  openStream,
  trackerOn,
  within,
} from '../support/event-streams.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

/**
 * Replica B's pool reaches PostgreSQL through a pooler (here a proxy) and
 * its LISTEN connection goes direct (DATABASE_LISTEN_URL, as README
 * advises). A read of notified events that fails (the pooler briefly out
 * of reach) is tried again until it succeeds: B's subscribers get those
 * events and the workflow's end, though no notification comes after them.
 */

let database: TestDatabase;
let proxy: TcpProxy;
let replicaA: TestApp;
let replicaB: TestApp;
let urlB: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  database = await createTestDatabase();
  const url = new URL(database.url);
  proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
  replicaA = await startTestAppOn(database);
  replicaB = await startTestAppOn(
    { ...database, url: proxy.through(database.url) },
    { DATABASE_LISTEN_URL: database.url, SSE_HEARTBEAT_MS: '200' },
  );
  urlB = await listen(replicaB);
  const created = await replicaA.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing');
  tenantId = created.tenant.id;
  key = created.adminKey.secret;
});

afterAll(async () => {
  await proxy?.restore().catch(() => undefined);
  if (replicaB) await closeTestApp(replicaB);
  if (replicaA) await closeTestApp(replicaA);
  await proxy?.close();
  await database?.drop();
});

describe('a subscriber on B whose hub fails to read notified events once', () => {
  it('still gets them, and the end, once the database is back', async () => {
    const workflowId = await insertWorkflow(replicaA, tenantId);
    const client = openStream(`${urlB}/v1/workflows/${workflowId}/events`, { key });
    await eventually(
      () => replicaB.services.hub.subscriberCount(workflowId) === 1,
      5_000,
      'B subscribed',
    );
    const tracker = trackerOn(replicaA, { tenantId, workflowId });
    await tracker.begin();
    await within(client.received(1), 5_000, 'event 1 reaches B');

    // B's pool loses the database for a moment; B's LISTEN does not.
    await proxy.cut();
    await tracker.emit('tool_call', 'search', 'completed');
    await tracker.end({ status: 'completed', answer: 'done' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await proxy.restore();

    await within(client.ended, 10_000, 'the stream on B ends after workflow_end');
    expect(client.events.map((event) => event.seq)).toEqual([1, 2, 3]);
  });
});
