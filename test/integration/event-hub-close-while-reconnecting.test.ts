import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/store/database.js';
import { createEventHub } from '../../src/tracker/event-hub.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { eventually } from '../support/event-streams.js';

/**
 * Closing the event hub while it reconnects its LISTEN connection: an
 * attempt already in flight that then succeeds ends its connection rather
 * than keeping it (a socket keeping the process alive, a backend on the
 * server), and one that then fails schedules no further attempt.
 */

/** A TCP proxy to PostgreSQL that can hold new connections (accepted, not forwarded) until released. */
function gateProxy(target: { host: string; port: number }) {
  let holding = false;
  const held: { client: net.Socket; forward: () => void }[] = [];
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((client) => {
    accepted += 1;
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    client.pause();
    const forward = () => {
      const upstream = net.connect(target.port, target.host);
      sockets.add(upstream);
      upstream.on('close', () => {
        sockets.delete(upstream);
        client.destroy();
      });
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    };
    if (holding) held.push({ client, forward });
    else forward();
  });
  return {
    server,
    listen: () =>
      new Promise<number>((resolve) =>
        server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)),
      ),
    hold() {
      holding = true;
    },
    held,
    accepted: () => accepted,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let database: TestDatabase;
let admin: pg.Client;
beforeAll(async () => {
  database = await createTestDatabase();
  admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
});
afterAll(async () => {
  await admin?.end();
  await database?.drop();
});

async function startHub() {
  const url = new URL(database.url);
  const proxy = gateProxy({ host: url.hostname, port: Number(url.port) });
  const port = await proxy.listen();
  const listenUrl = new URL(database.url);
  listenUrl.hostname = '127.0.0.1';
  listenUrl.port = String(port);
  listenUrl.searchParams.delete('host');
  const log = pino({ level: 'silent' });
  const handle = openDatabase({ url: database.url, poolMax: 2, log });
  const hub = createEventHub({
    db: handle.db,
    listenUrl: listenUrl.toString(),
    origin: 'test-replica',
    log,
  });
  await hub.start();
  return { proxy, hub, handle };
}

/** Drops the hub's LISTEN connection from the server side, with new connections held by the proxy. */
async function dropListenerAndHoldReconnect(
  hub: ReturnType<typeof createEventHub>,
  proxy: ReturnType<typeof gateProxy>,
) {
  const pid = hub.listenerPid();
  expect(pid).toBeTypeOf('number');
  proxy.hold();
  const before = proxy.accepted();
  await admin.query('SELECT pg_terminate_backend($1)', [pid]);
  // The hub noticed and its reconnect attempt is in flight, held by the proxy.
  await eventually(
    () => proxy.accepted() > before && proxy.held.length === 1,
    5_000,
    'reconnect attempt',
  );
  expect(hub.isListening()).toBe(false);
}

const listenBackends = async () => {
  const { rows } = await admin.query<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
  );
  return Number(rows[0]?.n);
};

describe('event hub closed while it reconnects', () => {
  it('an attempt that succeeds after close leaves no LISTEN connection open', async () => {
    const { proxy, hub, handle } = await startHub();
    try {
      await dropListenerAndHoldReconnect(hub, proxy);
      await hub.close();
      // Now let the attempt in flight through.
      const attempt = proxy.held[0];
      if (!attempt) throw new Error('no held attempt');
      attempt.forward();
      // Either the hub ends that connection (its socket closes), or it keeps it LISTENing.
      await eventually(
        () => attempt.client.destroyed || hub.isListening(),
        5_000,
        'the attempt to settle',
      );
      await sleep(100);
      expect(hub.isListening()).toBe(false);
      expect(await listenBackends()).toBe(0);
    } finally {
      await proxy.close();
      await handle.close();
    }
  });

  it('an attempt that fails after close schedules no further attempts', async () => {
    const { proxy, hub, handle } = await startHub();
    try {
      await dropListenerAndHoldReconnect(hub, proxy);
      await hub.close();
      const acceptedAtClose = proxy.accepted();
      // The attempt in flight fails (the database is out of reach).
      proxy.held[0]?.client.destroy();
      // A closed hub makes no new attempt: with the bug, one comes every 200 ms (then 400, 800...).
      await sleep(1_000);
      expect(proxy.accepted() - acceptedAtClose).toBe(0);
    } finally {
      await proxy.close();
      await handle.close();
    }
  });
});
