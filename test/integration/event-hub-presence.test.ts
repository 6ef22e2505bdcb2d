import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import { createTenancyService } from '../../src/tenancy/service.js';
import { createEventHub, type EventHub } from '../../src/tracker/event-hub.js';
import { createWorkflowTracker } from '../../src/tracker/tracker.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { insertQueuedWorkflow, silentLog } from '../support/tracker-database.js';

/**
 * A replica LISTENs only while another client, maybe another replica, is
 * connected to its database (tracker/listen-connection.ts): alone, it
 * would only be woken by its own notifications. Each replica here is a
 * pool and an event hub named as one (`applicationName`), on a database of
 * the file's own, which nothing else connects to; a hub looks for the
 * others when it connects and when told to (`lookForOthers`), never by
 * itself during a test.
 */

let database: TestDatabase;
let tenantId: string;
const replicas: { handle: DatabaseHandle; hub: EventHub }[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  const handle = openDatabase({ url: database.url, poolMax: 2, log: silentLog });
  const created = await createTenancyService(handle.db).bootstrap();
  await handle.close();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
});

afterEach(async () => {
  for (const replica of replicas.splice(0)) await close(replica);
});

afterAll(async () => {
  await database?.drop();
});

async function close(replica: { handle: DatabaseHandle; hub: EventHub }): Promise<void> {
  await replica.hub.close();
  await replica.handle.close();
}

async function startReplica(name: string, listening: boolean[] = [], listenLingerMs = 0) {
  const applicationName = `waymark-test-${name}`;
  const handle = openDatabase({ url: database.url, poolMax: 2, log: silentLog, applicationName });
  const hub = createEventHub({
    db: handle.db,
    listenUrl: database.url,
    origin: name,
    applicationName,
    log: silentLog,
    presenceIntervalMs: 3_600_000,
    listenLingerMs,
    onListening: (up) => listening.push(up),
  });
  const replica = { handle, hub };
  replicas.push(replica);
  await hub.start();
  return replica;
}

/**
 * Until the hub finds no other client: the backends of connections just
 * closed (the previous test's, the set-up's) leave pg_stat_activity as their
 * processes exit, a moment after.
 */
async function untilAlone(hub: EventHub): Promise<void> {
  await expect
    .poll(async () => {
      await hub.lookForOthers();
      return hub.hearsOthers();
    })
    .toBe(false);
}

describe('listening only while another client is connected', () => {
  it('a replica alone does not LISTEN; once another is there it does, reads what that one announced before, and stops when it has gone', async () => {
    const listening: boolean[] = [];
    const a = await startReplica('a', listening);
    await untilAlone(a.hub);
    expect(listening).toEqual([true]);
    const workflowId = await insertQueuedWorkflow(a.handle.db, tenantId);
    const received: WorkflowEvent[] = [];
    a.hub.subscribe(workflowId, {
      onEvent: (event) => received.push(event),
      onTokens: () => undefined,
    });

    const b = await startReplica('b');
    // B finds A's connections at once, when it connects.
    expect(b.hub.hearsOthers()).toBe(true);
    const onB = createWorkflowTracker({
      db: b.handle.db,
      hub: b.hub,
      tenantId,
      workflowId,
      origin: 'b',
      log: silentLog,
    });
    await onB.begin();
    await onB.emit('warning', null, 'info', { n: 1 });
    await new Promise((resolve) => setTimeout(resolve, 150));
    // Announced while A did not listen: A has not heard it.
    expect(received).toEqual([]);

    await a.hub.lookForOthers();
    expect(a.hub.hearsOthers()).toBe(true);
    // What it may have missed is read, and the key cache starts over.
    await expect.poll(() => received.map((event) => event.seq)).toEqual([1, 2]);
    expect(listening).toEqual([true, true]);
    await onB.emit('warning', null, 'info', { n: 2 });
    await expect.poll(() => received.map((event) => event.seq)).toEqual([1, 2, 3]);

    // B gone: A stops listening, and keeps its cache (nobody else can change a key).
    onB.close();
    replicas.splice(replicas.indexOf(b), 1);
    await close(b);
    await untilAlone(a.hub);
    expect(listening).toEqual([true, true]);
  });

  it('once the other client has gone it goes on listening for the linger, then stops', async () => {
    const d = await startReplica('d', [], 400);
    await untilAlone(d.hub);
    const other = openDatabase({ url: database.url, poolMax: 1, log: silentLog });
    await other.pool.query('SELECT 1');
    await d.hub.lookForOthers();
    expect(d.hub.hearsOthers()).toBe(true);
    await other.close();
    const gone = performance.now();
    // Its backend leaves pg_stat_activity a moment after: until then, or for the linger, it listens.
    await d.hub.lookForOthers();
    expect(d.hub.hearsOthers()).toBe(true);
    await untilAlone(d.hub);
    expect(performance.now() - gone).toBeGreaterThanOrEqual(400);
  });

  it('a client that is not a replica of this one counts as another (it may be a replica of an earlier release)', async () => {
    const c = await startReplica('c');
    await untilAlone(c.hub);
    const other = openDatabase({ url: database.url, poolMax: 1, log: silentLog });
    try {
      await other.pool.query('SELECT 1');
      await c.hub.lookForOthers();
      expect(c.hub.hearsOthers()).toBe(true);
    } finally {
      await other.close();
    }
  });
});
