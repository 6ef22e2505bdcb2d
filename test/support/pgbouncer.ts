import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { postgresOsUser } from '../../src/store/embedded-cluster.js';
import { freePort } from './process.js';

/**
 * A real PgBouncer in transaction mode in front of the test PostgreSQL, for
 * the tests that run the service through a pooler. Its binary comes from
 * the `pgbouncer` package (Debian puts it in /usr/sbin, often not on a
 * user's PATH); `PGBOUNCER_BIN` names another.
 */

/** Where the binary is looked for, in order, after PGBOUNCER_BIN. */
const CANDIDATES = ['/usr/sbin/pgbouncer', '/usr/local/sbin/pgbouncer', '/usr/bin/pgbouncer'];

/** The pgbouncer binary, or undefined when none is installed; a PGBOUNCER_BIN that is none is an error. */
export function findPgbouncer(): string | undefined {
  const named = process.env.PGBOUNCER_BIN;
  if (named) {
    if (!isExecutable(named)) throw new Error(`PGBOUNCER_BIN=${named} is not an executable file`);
    return named;
  }
  const fromPath = (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter(Boolean)
    .map((dir) => path.join(dir, 'pgbouncer'));
  return [...CANDIDATES, ...fromPath].find(isExecutable);
}

/**
 * The binary for a test file that needs it. Missing, the file fails when
 * CI is set (CI must run it), else it is skipped: this says why on stderr,
 * and the caller skips its tests when it gets undefined.
 */
export function pgbouncerForTests(testFile: string): string | undefined {
  const binary = findPgbouncer();
  if (binary) return binary;
  const missing =
    'no pgbouncer binary (looked for PGBOUNCER_BIN, /usr/sbin/pgbouncer, /usr/local/sbin, /usr/bin and PATH): install the `pgbouncer` package (apt-get install pgbouncer)';
  const onCi = !['', '0', 'false'].includes((process.env.CI ?? '').toLowerCase());
  if (onCi) throw new Error(`${missing}; CI must run ${testFile}`);
  console.warn(`${testFile} skipped: ${missing}`);
  return undefined;
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export interface PgbouncerOptions {
  /** The binary (findPgbouncer()). */
  binary: string;
  /**
   * A URL of the server to pool, whose user and password PgBouncer both
   * accepts from its clients and logs in with; every database on that
   * server is reachable through it under its own name.
   */
  serverUrl: string;
  /** Server connections per database and user; small, so that clients really share them. */
  poolSize: number;
  /**
   * How long a client's statement waits for a server connection before
   * PgBouncer refuses it (`query_wait_timeout`, FATAL 08P01) and closes
   * the client's connection; PgBouncer's default, 120 s, when left out.
   */
  queryWaitTimeoutSeconds?: number;
}

export interface Pgbouncer {
  /** `databaseUrl` (a database on the pooled server) with PgBouncer's host and port. */
  urlFor(databaseUrl: string): string;
  /**
   * Rows of an admin console command (`SHOW POOLS`, `SHOW SERVERS`...),
   * numbers as strings as PgBouncer sends them.
   */
  show(what: string): Promise<Record<string, string>[]>;
  /** Its log so far, for failure messages. */
  log(): string;
  /** Stops it and removes its folder. */
  stop(): Promise<void>;
}

export async function startPgbouncer(options: PgbouncerOptions): Promise<Pgbouncer> {
  const server = new URL(options.serverUrl);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const port = await freePort();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'waymark-pgbouncer-'));
  const quote = (text: string) => `"${text.replaceAll('"', '""')}"`;
  await writeFile(path.join(dir, 'userlist.txt'), `${quote(user)} ${quote(password)}\n`, {
    mode: 0o600,
  });
  const config = [
    '[databases]',
    // Any database name a client asks for, on the pooled server.
    `* = host=${server.hostname} port=${server.port || '5432'}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    // TCP only: no socket file in a folder that may not exist here.
    'unix_socket_dir =',
    'auth_type = scram-sha-256',
    `auth_file = ${path.join(dir, 'userlist.txt')}`,
    `admin_users = ${user}`,
    'pool_mode = transaction',
    `default_pool_size = ${options.poolSize}`,
    'min_pool_size = 0',
    'reserve_pool_size = 0',
    'max_client_conn = 500',
    ...(options.queryWaitTimeoutSeconds === undefined
      ? []
      : [`query_wait_timeout = ${options.queryWaitTimeoutSeconds}`]),
    // Each transaction takes the least recently used server connection, so
    // a client's consecutive transactions land on different sessions.
    'server_round_robin = 1',
    `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
    'log_connections = 0',
    'log_disconnections = 0',
    '',
  ].join('\n');
  await writeFile(path.join(dir, 'pgbouncer.ini'), config, { mode: 0o600 });
  // PgBouncer refuses to run as root: as root it runs as the `postgres` OS
  // user, as the embedded PostgreSQL does, and owns its folder.
  const osUser = await postgresOsUser();
  if (osUser) {
    for (const file of ['', 'userlist.txt', 'pgbouncer.ini']) {
      await chown(path.join(dir, file), osUser.uid, osUser.gid);
    }
  }
  const child = spawn(options.binary, [path.join(dir, 'pgbouncer.ini')], {
    ...(osUser ?? {}),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const collect = (chunk: string) => {
    output += chunk;
  };
  child.stdout?.setEncoding('utf8').on('data', collect);
  child.stderr?.setEncoding('utf8').on('data', collect);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const address = { host: '127.0.0.1', port };
  const stop = async () => {
    await stopChild(child, exited);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitUntilAccepting({ ...address, user, password, child, log: () => output });
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    urlFor(databaseUrl) {
      const url = new URL(databaseUrl);
      url.hostname = address.host;
      url.port = String(address.port);
      url.search = '';
      return url.toString();
    },
    async show(what) {
      // The admin console speaks only the simple query protocol: no parameters.
      const client = new pg.Client({ ...address, user, password, database: 'pgbouncer' });
      await client.connect();
      try {
        return (await client.query(`SHOW ${what}`)).rows as Record<string, string>[];
      } finally {
        await client.end();
      }
    },
    log: () => output,
    stop,
  };
}

async function waitUntilAccepting(options: {
  host: string;
  port: number;
  user: string;
  password: string;
  child: ChildProcess;
  log: () => string;
}): Promise<void> {
  const deadline = Date.now() + 15_000;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    if (options.child.exitCode !== null || options.child.signalCode !== null) {
      throw new Error(`pgbouncer exited at its start:\n${options.log()}`);
    }
    const client = new pg.Client({
      host: options.host,
      port: options.port,
      user: options.user,
      password: options.password,
      database: 'pgbouncer',
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SHOW VERSION');
      await client.end();
      return;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
      await client.end().catch(() => undefined);
    }
    await sleep(100);
  }
  throw new Error(`pgbouncer did not accept connections within 15 s (${last}):\n${options.log()}`);
}

async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  // SIGTERM: an immediate shutdown up to PgBouncer 1.22; later versions
  // wait for their clients, which are gone by now (else SIGKILL after 5 s).
  child.kill('SIGTERM');
  const gone = await Promise.race([exited.then(() => true), sleep(5_000, false)]);
  if (!gone) {
    child.kill('SIGKILL');
    await exited;
  }
}
