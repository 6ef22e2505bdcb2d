import { randomUUID } from 'node:crypto';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { type DatabaseHandle, type Db, openDatabase } from '../../src/store/database.js';
import { EVENTS_CHANNEL } from '../../src/store/event-statement-parts.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { createTenancyService } from '../../src/tenancy/service.js';
import { createEventHub, type EventHub } from '../../src/tracker/event-hub.js';
import { type Notification, parseNotification } from '../../src/tracker/notification.js';
import { createWorkflowTracker, type WorkflowTracker } from '../../src/tracker/tracker.js';
import { createTestDatabase, type TestDatabase } from './database.js';

export const silentLog = pino({ level: 'silent' });

/**
 * What the tracker's tests share, set up before the file's tests and torn
 * down after: a fresh database with one tenant, a pool, and the event hub
 * of replica `replica-a`. Its fields are read once the tests run.
 */
export interface TrackerDatabase {
  readonly database: TestDatabase;
  readonly handle: DatabaseHandle;
  readonly hub: EventHub;
  readonly tenantId: string;
  /** A queued workflow row of the tenant, or of `tenantId`. */
  newWorkflow(tenantId?: string): Promise<string>;
  trackerFor(workflowId: string, origin?: string, eventHub?: EventHub): WorkflowTracker;
  /** The stored events' seqs, in order. */
  storedSeqs(workflowId: string): Promise<number[]>;
}

export function useTrackerDatabase(): TrackerDatabase {
  let database: TestDatabase | undefined;
  let handle: DatabaseHandle | undefined;
  let hub: EventHub | undefined;
  let tenantId: string | undefined;
  const ready = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the tracker database is set up in beforeAll');
    return value;
  };
  beforeAll(async () => {
    database = await createTestDatabase();
    handle = openDatabase({ url: database.url, poolMax: 10, log: silentLog });
    const created = await createTenancyService(handle.db).bootstrap();
    if (!created) throw new Error('no tenant');
    tenantId = created.tenant.id;
    hub = createEventHub({
      db: handle.db,
      listenUrl: database.url,
      origin: 'replica-a',
      log: silentLog,
    });
    await hub.start();
  });
  afterAll(async () => {
    await hub?.close();
    await handle?.close();
    await database?.drop();
  });
  const context: TrackerDatabase = {
    get database() {
      return ready(database);
    },
    get handle() {
      return ready(handle);
    },
    get hub() {
      return ready(hub);
    },
    get tenantId() {
      return ready(tenantId);
    },
    newWorkflow(tenantId = context.tenantId) {
      return insertQueuedWorkflow(context.handle.db, tenantId);
    },
    trackerFor(workflowId, origin = 'replica-a', eventHub = context.hub) {
      return createWorkflowTracker({
        db: context.handle.db,
        hub: eventHub,
        tenantId: context.tenantId,
        workflowId,
        origin,
        log: silentLog,
        tokenFlushMs: 20,
      });
    },
    async storedSeqs(workflowId) {
      const rows = await workflowEventsRepository(context.handle.db).listAfter({
        workflowId,
        afterSeq: 0,
        limit: 10_000,
      });
      return rows.map((row) => row.seq);
    },
  };
  return context;
}

/** A queued workflow row of `tenantId`, as the tracker's tests start from; resolves with its id. */
export async function insertQueuedWorkflow(db: Db, tenantId: string): Promise<string> {
  const id = randomUUID();
  await db
    .insertInto('workflows')
    .values({
      id,
      tenant_id: tenantId,
      status: 'queued',
      mode: 'auto',
      model: 'scripted',
      input: 'hi',
      tools: [],
      metadata: '{}',
    })
    .execute();
  return id;
}

/**
 * The events channel's notifications, as parsed, in the order they came:
 * a LISTEN connection of its own, opened before the file's tests (after
 * `useTrackerDatabase`'s set-up) and closed after them.
 */
export function useEventNotifications(setup: TrackerDatabase) {
  const received: Notification[] = [];
  let listener: pg.Client | undefined;
  beforeAll(async () => {
    listener = new pg.Client({ connectionString: setup.database.url });
    await listener.connect();
    listener.on('notification', (message) => {
      const parsed = message.payload ? parseNotification(message.payload) : undefined;
      if (parsed) received.push(parsed);
    });
    await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
  });
  afterAll(async () => {
    await listener?.end();
  });
  return {
    received,
    /** Waits (two seconds at most) until `count` have come in all. */
    async waitFor(count: number): Promise<void> {
      for (let tries = 0; received.length < count && tries < 100; tries += 1) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
  };
}
