import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/store/embedded-postgres.js';

/** Embedded servers of their own (the suite's database may be another server). */

const log = createLogger({ LOG_LEVEL: 'silent' });
const cleanups: (() => Promise<void>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

async function startIn(
  dataDir: string,
  onPassword?: (password: string) => void,
): Promise<EmbeddedPostgres> {
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const server = await startEmbeddedPostgres({ dataDir, port: 0, log, onPassword });
  cleanups.push(() => server.stop());
  return server;
}

/** The server's address as the connection sees it: null over a Unix-domain socket. */
async function serverAddress(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ address: string | null }>(
      'SELECT host(inet_server_addr()) AS address',
    );
    return rows[0]?.address ?? null;
  } finally {
    await client.end();
  }
}

describe('embedded PostgreSQL connections', () => {
  it('go through a Unix-domain socket in the data folder, and TCP on 127.0.0.1 still answers', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-socket-'));
    // The password main.ts replaces in log lines: the one the server is reached with.
    const told: string[] = [];
    const server = await startIn(dataDir, (password) => told.push(password));
    const url = new URL(server.url);
    expect(told).toEqual([url.password]);
    expect(url.searchParams.get('host')).toBe(path.join(dataDir, 'socket'));
    expect(new URL(server.adminUrl).searchParams.get('host')).toBe(path.join(dataDir, 'socket'));
    expect(await serverAddress(server.url)).toBeNull();
    expect(await serverAddress(server.adminUrl)).toBeNull();
    // Only the server's OS user (and root) may reach the socket.
    expect((await stat(path.join(dataDir, 'socket'))).mode & 0o777).toBe(0o700);
    url.searchParams.delete('host');
    expect(await serverAddress(url.toString())).toBe('127.0.0.1');
  });

  it('go over TCP on 127.0.0.1 when the socket’s path would be too long for a socket address', async () => {
    const parent = await mkdtemp(path.join(os.tmpdir(), 'waymark-socket-'));
    const dataDir = path.join(
      parent,
      'a-data-folder-whose-path-is-too-long-for-a-socket-'.repeat(2),
    );
    cleanups.push(() => rm(parent, { recursive: true, force: true }));
    // Run as root, the server's OS user must pass through it (as through the data folder).
    await chmod(parent, 0o711);
    const server = await startIn(dataDir);
    expect(new URL(server.url).searchParams.has('host')).toBe(false);
    expect(await serverAddress(server.url)).toBe('127.0.0.1');
  });
});
