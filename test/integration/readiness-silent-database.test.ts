import net from 'node:net';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { closeServices, createServices } from '../../src/services.js';
import { readMigrations } from '../../src/store/migrate.js';
import { createTestDatabase } from '../support/database.js';

/**
 * A database that stops answering without closing its connections (its
 * host froze, a network partition, a firewall dropping packets): /readyz
 * answers 503 within its deadline, as it does when the database refuses
 * connections, and probes arriving meanwhile share the one check in flight.
 */

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

/** A proxy that can go silent: bytes are no longer passed on either way, sockets stay open. */
async function freezableProxy(target: { host: string; port: number }) {
  let frozen = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    client.on('data', (chunk) => {
      if (!frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!frozen) client.write(chunk);
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    freeze: () => {
      frozen = true;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('/readyz while the database is silent', () => {
  it('answers 503 within 15 s instead of hanging', async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const direct = new URL(database.url);
    const proxy = await freezableProxy({ host: direct.hostname, port: Number(direct.port) });
    const proxied = new URL(database.url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(proxy.port);
    proxied.searchParams.delete('host');

    const services = createServices({
      config: loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: proxied.toString() }),
      log: pino({ level: 'silent' }),
      databaseUrl: proxied.toString(),
      migrations: await readMigrations(),
    });
    const app = await buildApp(services);
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(async () => {
      await app.close();
      await closeServices(services);
    });
    // Cleanups run in reverse: the proxy closes first, so hung queries fail and the app can close.
    cleanups.push(() => proxy.close());
    const address = app.server.address() as net.AddressInfo;
    const readyz = `http://127.0.0.1:${address.port}/readyz`;

    expect((await fetch(readyz)).status).toBe(200);
    proxy.freeze();
    const started = Date.now();
    const outcome = await fetch(readyz, { signal: AbortSignal.timeout(15_000) }).then(
      (response) => response.status,
      () => `no answer after ${Date.now() - started} ms`,
    );
    expect(outcome).toBe(503);
    // Probes arriving while the check is in flight share it: each answers 503 too.
    const probes = await Promise.all(
      Array.from({ length: 3 }, () =>
        fetch(readyz, { signal: AbortSignal.timeout(15_000) }).then((response) => response.status),
      ),
    );
    expect(probes).toEqual([503, 503, 503]);
    expect(services.database.pool.totalCount).toBeLessThanOrEqual(2);
  }, 60_000);
});
