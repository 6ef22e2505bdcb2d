import { randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import net from 'node:net';

/**
 * Ports are picked below the kernel's ephemeral range (where it takes the
 * local port of each outgoing connection, and of a listen on port 0): a
 * port found free there could be taken by any connection before its user
 * listens on it, a second later (a replica's start, once migrated: CI saw
 * EADDRINUSE so). Below the range only an explicit listen can take it.
 */
const BELOW_EPHEMERAL_PORTS = 12_000;
/** Linux's default start of the range, where it cannot be read. */
const DEFAULT_EPHEMERAL_START = 32_768;
const MAX_TRIES = 200;

/** The first port of the kernel's ephemeral range. */
async function ephemeralStart(): Promise<number> {
  try {
    const range = await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8');
    const start = Number(range.trim().split(/\s+/)[0]);
    return Number.isInteger(start) && start > 1024 ? start : DEFAULT_EPHEMERAL_START;
  } catch {
    return DEFAULT_EPHEMERAL_START;
  }
}

/** Listens on `port` of 127.0.0.1; false when it is taken. */
function tryListen(server: net.Server, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => {
      server.off('listening', onListening);
      if (error.code === 'EADDRINUSE' || error.code === 'EACCES') resolve(false);
      else reject(error);
    };
    const onListening = () => {
      server.off('error', onError);
      resolve(true);
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen(port, '127.0.0.1');
  });
}

/**
 * Distinct TCP ports that were free on 127.0.0.1 a moment ago, below the
 * ephemeral range. Every one is held until all are found, so the same port
 * is never returned twice.
 */
export async function freePorts(count: number): Promise<number[]> {
  const end = await ephemeralStart();
  const start = Math.max(1024, end - BELOW_EPHEMERAL_PORTS);
  const servers: net.Server[] = [];
  try {
    const ports: number[] = [];
    for (let tries = 0; ports.length < count; tries++) {
      if (tries >= MAX_TRIES) throw new Error(`no free port in ${start}-${end - 1}`);
      const server = net.createServer();
      const port = randomInt(start, end);
      if (!(await tryListen(server, port))) continue;
      servers.push(server);
      ports.push(port);
    }
    return ports;
  } finally {
    await Promise.all(
      servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
    );
  }
}

export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  if (port === undefined) throw new Error('could not find a free port');
  return port;
}
