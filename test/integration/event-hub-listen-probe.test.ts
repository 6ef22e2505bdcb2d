import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import { createEventHub } from '../../src/tracker/event-hub.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * The event hub starts only once its LISTEN connection has heard a
 * notification sent through the pool: a LISTEN URL that reaches another
 * database than DATABASE_URL (or goes through a transaction-mode pooler,
 * test/e2e/pgbouncer-listen.test.ts) would otherwise never hear the other
 * replicas, and their workflows' streams on this one would wait forever.
 */

const log = pino({ level: 'silent' });
let pooled: TestDatabase;
let other: TestDatabase;
let handle: DatabaseHandle;

beforeAll(async () => {
  pooled = await createTestDatabase();
  other = await createTestDatabase();
  handle = openDatabase({ url: pooled.url, poolMax: 2, log });
});

afterAll(async () => {
  await handle?.close();
  await pooled?.drop();
  await other?.drop();
});

describe('event hub start', () => {
  it('refuses to start when its LISTEN URL names another database than its pool, naming DATABASE_LISTEN_URL', async () => {
    const hub = createEventHub({
      db: handle.db,
      listenUrl: other.url,
      origin: 'test-replica',
      log,
      listenProbeTimeoutMs: 500,
    });
    try {
      await expect(hub.start()).rejects.toThrow(/DATABASE_LISTEN_URL/);
      expect(hub.isListening()).toBe(false);
    } finally {
      await hub.close();
    }
  });

  it('starts when its LISTEN URL reaches the pool’s own database', async () => {
    const hub = createEventHub({
      db: handle.db,
      listenUrl: pooled.url,
      origin: 'test-replica',
      log,
    });
    try {
      await hub.start();
      expect(hub.isListening()).toBe(true);
    } finally {
      await hub.close();
    }
  });
});
