import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { parseArgs } from 'node:util';
import type { Db } from '../../src/store/database.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { percentile, round, wholeNumber } from '../support/stats.js';
import { startServer } from './server-process.js';
import { type Emitted, emitToAll, httpSubscribers, hubSubscribers } from './subscribers.js';

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
        ? httpSubscribers(fixture.adminSecret, ready.url, workflowId)
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
