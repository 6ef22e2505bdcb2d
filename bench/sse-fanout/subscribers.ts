import net from 'node:net';
import type { ServerProcess } from './server-process.js';

/**
 * bench/sse-fanout's subscribers to one workflow's events: real SSE
 * connections from the benchmark's process (`http`), or subscribers inside
 * the server process (`hub`), and how one event is timed until all of
 * them have it.
 */

/** How long one event may take to reach every subscriber before the run fails. */
const EVENT_TIMEOUT_MS = 30_000;

export interface Subscribers {
  open(count: number): Promise<void>;
  close(): Promise<void>;
  /**
   * When every open subscriber has had event `seq` (a performance.now()
   * time); undefined when the server times deliveries itself.
   */
  allHave(seq: number): Promise<number> | undefined;
}

export interface Emitted {
  /** Until every subscriber had the event. */
  latencyMs: number;
  /** Until emit returned in the server. */
  emitMs: number;
}

/** Emits one event and waits until every subscriber has it. */
export async function emitToAll(
  server: ServerProcess,
  subscribers: Subscribers,
  n: number,
): Promise<Emitted> {
  const started = performance.now();
  const emitted = await withTimeout(server.request({ type: 'emit', n }, 'emitted'));
  if (emitted.latencyMs !== null) return { latencyMs: emitted.latencyMs, emitMs: emitted.emitMs };
  const done = subscribers.allHave(emitted.seq);
  if (!done) throw new Error(`seq ${emitted.seq}: no subscriber counts deliveries`);
  return { latencyMs: (await withTimeout(done)) - started, emitMs: emitted.emitMs };
}

/** Subscribers inside the server process, through services.hub.subscribe. */
export function hubSubscribers(server: ServerProcess): Subscribers {
  return {
    async open(count) {
      await server.request({ type: 'subscribe', count }, 'subscribed');
    },
    async close() {
      await server.request({ type: 'unsubscribe' }, 'subscribed');
    },
    // The server times hub deliveries itself (emitted.latencyMs).
    allHave: () => undefined,
  };
}

/**
 * Real SSE connections from this process: HTTP/1.1 on plain sockets, read
 * with a minimal parser that only looks for `id:` lines. Node's HTTP client
 * and stream decoding cost tens of microseconds per chunk, which at 10,000
 * connections in one process on two cores would be most of what is timed;
 * this keeps the client's share small, so the figure is mostly the server's.
 */
export function httpSubscribers(
  adminSecret: string,
  baseUrl: string,
  workflowId: string,
): Subscribers {
  const url = new URL(`/v1/workflows/${workflowId}/events`, baseUrl);
  const requestHead = [
    `GET ${url.pathname} HTTP/1.1`,
    `Host: ${url.host}`,
    `Authorization: Bearer ${adminSecret}`,
    'Accept: text/event-stream',
    '',
    '',
  ].join('\r\n');
  let sockets: net.Socket[] = [];
  const received = new Map<number, number>();
  const waiting = new Map<number, (at: number) => void>();
  const completedAt = new Map<number, number>();

  const onEvent = (seq: number) => {
    const count = (received.get(seq) ?? 0) + 1;
    received.set(seq, count);
    if (count !== sockets.length) return;
    const at = performance.now();
    completedAt.set(seq, at);
    waiting.get(seq)?.(at);
  };

  /** Every `id:` line in complete frames; the rest waits for the next read. */
  const parseFrames = (buffer: string): string => {
    // Frames end in a blank line; JSON never holds a raw line break, and
    // the chunked encoding's size lines between frames hold none either.
    const last = buffer.lastIndexOf('\n\n');
    if (last === -1) return buffer;
    for (const match of buffer.slice(0, last).matchAll(/(?:^|\n)id: (\d+)\n/g)) {
      onEvent(Number(match[1]));
    }
    return buffer.slice(last + 2);
  };

  const connect = (): Promise<net.Socket> =>
    new Promise((resolve, reject) => {
      const socket = net.connect({ host: url.hostname, port: Number(url.port) });
      socket.setEncoding('latin1');
      let buffer = '';
      let streaming = false;
      socket.once('connect', () => socket.write(requestHead));
      socket.on('data', (chunk: string) => {
        buffer += chunk;
        if (!streaming) {
          const headEnd = buffer.indexOf('\r\n\r\n');
          if (headEnd === -1) return;
          const status = buffer.slice(0, buffer.indexOf('\r\n'));
          if (!status.startsWith('HTTP/1.1 200 ')) {
            reject(new Error(`GET ${url.pathname} answered ${status}`));
            socket.destroy();
            return;
          }
          streaming = true;
          buffer = buffer.slice(headEnd + 4);
          resolve(socket);
        }
        buffer = parseFrames(buffer);
      });
      // Once streaming, an error is the server going away at the end; the
      // per-event counts are what detect a lost stream.
      socket.on('error', (error) => {
        if (!streaming) reject(error);
      });
    });

  return {
    async open(count) {
      // In waves: thousands of simultaneous connects would only queue in the
      // listen backlog and the server's database pool.
      const opened: net.Socket[] = [];
      for (let start = 0; start < count; start += 200) {
        const wave = Math.min(200, count - start);
        opened.push(...(await Promise.all(Array.from({ length: wave }, connect))));
      }
      sockets = opened;
      received.clear();
      completedAt.clear();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      sockets = [];
      // Let the server see the closes before anything is measured.
      await new Promise((resolve) => setTimeout(resolve, 500));
    },
    allHave(seq) {
      const at = completedAt.get(seq);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(seq, resolve));
    },
  };
}

function withTimeout<T>(promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer within ${EVENT_TIMEOUT_MS} ms`)),
      EVENT_TIMEOUT_MS,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
