import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Db } from '../../src/store/database.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { percentile, round, wholeNumber } from '../support/stats.js';
import type { FromServer, ServerOptions, ToServer } from './server.js';

/**
 * Fan-out of one workflow's events to many concurrent subscribers on one
 * instance: server RSS per subscriber, and the latency from calling
 * `tracker.emit` until EVERY subscriber has the event.
 *
 * The server (real services and app over an embedded PostgreSQL) runs in a
 * child process per subscriber count, started with --expose-gc, so its RSS
 * is its own and starts fresh each time; this process drives it over IPC
 * and, for the `http` transport, holds the client side. Two transports:
 *
 *   http  real SSE connections over loopback to GET /v1/workflows/:id/events;
 *         latency runs from sending the emit command (IPC, ~0.1 ms) until
 *         the last client parsed the event's `id:` line
 *   hub   subscribers registered with services.hub.subscribe in the server;
 *         latency runs from calling emit until the last one was called.
 *         No sockets, so RSS per subscriber is the hub's share only.
 *
 * `auto` takes http when the app has the events route, else hub. Events go
 * one at a time (the next once all have the previous), after a warm-up with
 * one subscriber; RSS is measured after a full GC before subscribing
 * (baseline) and after. Client and server share the machine's CPUs.
 *
 *   npm run bench -- sse-fanout [--sizes 1000,10000] [--events 200] [--warmup 20]
 *     [--transport auto|http|hub] [--transport-10000 auto|http|hub]
 */

/** From the issue. */
const TARGET_RSS_MB_AT_10000 = 1024;
const TARGET_P99_MS_AT_1000 = 100;

type Transport = 'http' | 'hub';
type TransportChoice = Transport | 'auto';

interface Plan {
  sizes: number[];
  events: number;
  warmup: number;
  transports: Map<number, TransportChoice>;
}

interface SizeResult {
  subscribers: number;
  transport: Transport;
  baselineRssMb: number;
  rssMb: number;
  kbPerSubscriber: number;
  heapKbPerSubscriber: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Until emit returned in the server: commit plus synchronous delivery. */
  emitP50Ms: number;
  emitP99Ms: number;
  /** 1-minute load average when the size started: other work on the machine skews the figures. */
  loadAverage: number;
}

interface Fixture {
  databaseUrl: string;
  db: Db;
  tenantId: string;
  adminSecret: string;
}

const serverFile = fileURLToPath(new URL('./server.ts', import.meta.url));
const EVENT_TIMEOUT_MS = 30_000;

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      sizes: { type: 'string', default: '1000,10000' },
      events: { type: 'string', default: '200' },
      warmup: { type: 'string', default: '20' },
      transport: { type: 'string', default: 'auto' },
      'transport-10000': { type: 'string' },
    },
  });
  const sizes = values.sizes.split(',').map((size) => wholeNumber('--sizes', size.trim(), 1));
  const transports = new Map(
    sizes.map((size) => [
      size,
      transportChoice(
        size === 10_000 && values['transport-10000'] ? values['transport-10000'] : values.transport,
      ),
    ]),
  );
  const plan: Plan = {
    sizes,
    events: wholeNumber('--events', values.events, 1),
    warmup: wholeNumber('--warmup', values.warmup, 0),
    transports,
  };

  await runBenchmark(
    'sse-fanout',
    async (signal, cleanups) => {
      const fixture = await setUp(cleanups);
      const results: SizeResult[] = [];
      for (const size of plan.sizes) {
        if (signal.aborted) throw signal.reason;
        results.push(await measureSize(fixture, plan, size, signal));
      }
      return results;
    },
    (results) => printSummary(plan, results),
  );
}

async function setUp(cleanups: Cleanup[]): Promise<Fixture> {
  const embedded = await startBenchDatabase(cleanups, 'sse');
  // This process only inserts a workflow per size; the server process has its own pool.
  const { services, bootstrap } = await startBenchServices(cleanups, {
    databaseUrl: embedded.url,
    env: { DATABASE_POOL_MAX: '2' },
  });
  return {
    databaseUrl: embedded.url,
    db: services.database.db,
    tenantId: bootstrap.tenant.id,
    adminSecret: bootstrap.adminKey.secret,
  };
}

/** A fresh running workflow per size, so every run starts at seq 1. */
async function insertRunningWorkflow(fixture: Fixture): Promise<string> {
  const id = randomUUID();
  await fixture.db
    .insertInto('workflows')
    .values({
      id,
      tenant_id: fixture.tenantId,
      status: 'running',
      mode: 'simple',
      model: 'bench',
      input: 'bench',
      tools: [],
      metadata: '{}',
      started_at: new Date(),
    })
    .execute();
  return id;
}

async function measureSize(
  fixture: Fixture,
  plan: Plan,
  size: number,
  signal: AbortSignal,
): Promise<SizeResult> {
  const loadAverage = os.loadavg()[0] ?? Number.NaN;
  const workflowId = await insertRunningWorkflow(fixture);
  const server = startServer({
    databaseUrl: fixture.databaseUrl,
    tenantId: fixture.tenantId,
    workflowId,
  });
  try {
    const ready = await server.reply('ready');
    if (!ready.gc) throw new Error('the server process has no gc(); RSS would include garbage');
    const choice = plan.transports.get(size) ?? 'auto';
    const transport: Transport =
      choice === 'auto' ? (ready.hasEventsRoute ? 'http' : 'hub') : choice;
    if (transport === 'http' && !ready.hasEventsRoute) {
      throw new Error('--transport http, but the app has no GET /v1/workflows/:id/events route');
    }
    const subscribers =
      transport === 'http'
        ? httpSubscribers(fixture, ready.url, workflowId)
        : hubSubscribers(server);

    // Warm-up: code paths compiled and pools filled before the baseline.
    await subscribers.open(1);
    for (let n = 0; n < plan.warmup; n++) await emitToAll(server, subscribers, n);
    await subscribers.close();
    const baseline = await server.request({ type: 'measure' }, 'measured');

    await subscribers.open(size);
    const subscribed = await server.request({ type: 'measure' }, 'measured');
    const emitted: Emitted[] = [];
    for (let n = 0; n < plan.events; n++) {
      if (signal.aborted) throw signal.reason;
      emitted.push(await emitToAll(server, subscribers, plan.warmup + n));
    }
    await subscribers.close();

    const sorted = emitted.map((one) => one.latencyMs).sort((a, b) => a - b);
    const emitSorted = emitted.map((one) => one.emitMs).sort((a, b) => a - b);
    return {
      subscribers: size,
      transport,
      baselineRssMb: baseline.rssBytes / 2 ** 20,
      rssMb: subscribed.rssBytes / 2 ** 20,
      kbPerSubscriber: (subscribed.rssBytes - baseline.rssBytes) / 1024 / size,
      heapKbPerSubscriber: (subscribed.heapUsedBytes - baseline.heapUsedBytes) / 1024 / size,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      maxMs: sorted[sorted.length - 1] ?? Number.NaN,
      emitP50Ms: percentile(emitSorted, 50),
      emitP99Ms: percentile(emitSorted, 99),
      loadAverage,
    };
  } finally {
    await server.stop();
  }
}

// --- the server process --------------------------------------------------

type Reply<T extends FromServer['type']> = Extract<FromServer, { type: T }>;

interface ServerProcess {
  /** The next message of `type`; a `failed` message or an exit rejects instead. */
  reply<T extends FromServer['type']>(type: T): Promise<Reply<T>>;
  request<T extends FromServer['type']>(message: ToServer, type: T): Promise<Reply<T>>;
  /** Asks the process to close everything and exit; kills it if it has not within 10 s. */
  stop(): Promise<void>;
}

function startServer(options: ServerOptions): ServerProcess {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', serverFile, JSON.stringify(options)],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let waiter:
    | { type: string; resolve(message: FromServer): void; reject(error: Error): void }
    | undefined;
  const fail = (error: Error) => {
    const current = waiter;
    waiter = undefined;
    current?.reject(error);
  };
  child.on('message', (message: FromServer) => {
    if (message.type === 'failed') return fail(new Error(`server: ${message.message}`));
    if (waiter?.type !== message.type) return;
    const current = waiter;
    waiter = undefined;
    current.resolve(message);
  });
  void exited.then((code) => fail(new Error(`the server process exited (${code})`)));

  const reply = <T extends FromServer['type']>(type: T): Promise<Reply<T>> =>
    new Promise((resolve, reject) => {
      waiter = { type, resolve: resolve as (message: FromServer) => void, reject };
    });
  return {
    reply,
    request(message, type) {
      const answered = reply(type);
      child.send(message);
      return answered;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      if (child.connected) child.send({ type: 'stop' } satisfies ToServer);
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

// --- subscribers ---------------------------------------------------------

interface Subscribers {
  open(count: number): Promise<void>;
  close(): Promise<void>;
  /**
   * When every open subscriber has had event `seq` (a performance.now()
   * time); undefined when the server times deliveries itself.
   */
  allHave(seq: number): Promise<number> | undefined;
}

interface Emitted {
  /** Until every subscriber had the event. */
  latencyMs: number;
  /** Until emit returned in the server. */
  emitMs: number;
}

/** Emits one event and waits until every subscriber has it. */
async function emitToAll(
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
function hubSubscribers(server: ServerProcess): Subscribers {
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
function httpSubscribers(fixture: Fixture, baseUrl: string, workflowId: string): Subscribers {
  const url = new URL(`/v1/workflows/${workflowId}/events`, baseUrl);
  const requestHead = [
    `GET ${url.pathname} HTTP/1.1`,
    `Host: ${url.host}`,
    `Authorization: Bearer ${fixture.adminSecret}`,
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

// --- helpers -------------------------------------------------------------

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

function printSummary(plan: Plan, results: SizeResult[]): void {
  const bySize = new Map(results.map((result) => [result.subscribers, result]));
  const lines = [
    `sse-fanout: one workflow, ${plan.events} events per size one at a time after ${plan.warmup} warm-up events; ` +
      `server in its own process (--expose-gc); ${os.cpus().length} CPUs shared with the clients`,
  ];
  for (const result of results) {
    const how =
      result.transport === 'http'
        ? 'real SSE connections over loopback'
        : 'hub subscriptions in the server process, no sockets';
    lines.push(
      `  ${result.subscribers} subscribers (${how}; load average ${round(result.loadAverage, 2)} at start):`,
      `    server RSS ${round(result.rssMb, 1)} MB (baseline ${round(result.baselineRssMb, 1)} MB, ` +
        `${round(result.kbPerSubscriber, 2)} KB RSS and ${round(result.heapKbPerSubscriber, 2)} KB of JS heap per subscriber)`,
      `    emit -> every subscriber: p50 ${round(result.p50Ms, 2)} ms, p99 ${round(result.p99Ms, 2)} ms, max ${round(result.maxMs, 2)} ms`,
      `    of which emit itself (commit, then writing to every subscriber): p50 ${round(result.emitP50Ms, 2)} ms, p99 ${round(result.emitP99Ms, 2)} ms`,
    );
  }
  const at1000 = bySize.get(1_000);
  const at10000 = bySize.get(10_000);
  if (at10000) {
    lines.push(
      `  target: 10000 subscribers under ${TARGET_RSS_MB_AT_10000} MB RSS: ${round(at10000.rssMb, 1)} MB, ${at10000.rssMb < TARGET_RSS_MB_AT_10000 ? 'met' : 'MISSED'}`,
    );
  }
  if (at1000) {
    lines.push(
      `  target: p99 under ${TARGET_P99_MS_AT_1000} ms at 1000: ${round(at1000.p99Ms, 2)} ms, ${at1000.p99Ms < TARGET_P99_MS_AT_1000 ? 'met' : 'MISSED'}`,
    );
  }
  lines.push(
    // The one line scripts parse: keep it last and its keys stable.
    `bench sse-fanout: ${JSON.stringify({
      rss_mb_10000: at10000 ? round(at10000.rssMb, 1) : null,
      p50_ms_1000: at1000 ? round(at1000.p50Ms, 2) : null,
      p99_ms_1000: at1000 ? round(at1000.p99Ms, 2) : null,
      p99_ms_10000: at10000 ? round(at10000.p99Ms, 2) : null,
    })}`,
    '',
  );
  process.stdout.write(lines.join('\n'));
}

function transportChoice(value: string): TransportChoice {
  if (value === 'auto' || value === 'http' || value === 'hub') return value;
  throw new Error(`--transport must be auto, http or hub, got "${value}"`);
}
