import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import type { Logger } from 'pino';
import { type Db, openDatabase } from '../../src/store/database.js';
import { EVENTS_CHANNEL } from '../../src/store/event-statement-parts.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { createEventHub } from '../../src/tracker/event-hub.js';
import { notificationPayload, parseNotification } from '../../src/tracker/notification.js';
import { createWorkflowTracker, type WorkflowTracker } from '../../src/tracker/tracker.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { percentile, round, wholeNumber } from '../support/stats.js';

/**
 * What NOTIFY costs the event log. PostgreSQL serialises the commits of
 * every transaction that issued NOTIFY behind one cluster-wide lock, held
 * through the commit's WAL flush, so notifying commits cannot share a flush
 * (group commit) the way plain ones do. This measures commits per second of
 * the small transaction `tracker.emit` runs (`workflowEventsRepository(tx)
 * .append` of one event) from `--clients` concurrent clients, each on its
 * own workflows, in four modes:
 *
 *   plain       append only
 *   notify      append + one NOTIFY in the same transaction (what emit does)
 *   per-chunk   notify, while `--streams` workflows stream answer text at
 *               `--token-rate` tokens/s of `--token-bytes` bytes through the
 *               real WorkflowTracker with no coalescing (a NOTIFY per token)
 *   coalesced   the same streams with the tracker's default 50 ms coalescing
 *
 * The token streams use their own pool, so what they take from the appends
 * is database time, not pool slots. One LISTEN connection (a replica's
 * hub) receives every notification. Modes alternate round by round so
 * drift (WAL growth, checkpoints, a noisy neighbour) hits all alike; each
 * figure is the median over rounds. fsync and synchronous_commit are
 * PostgreSQL's defaults, as in production.
 *
 *   npm run bench -- notify-cost [--clients 8] [--workflows 64] [--seconds 3]
 *     [--rounds 3] [--streams 32] [--token-rate 80] [--token-bytes 5] [--flush-ms 50]
 */

const MODES = ['plain', 'notify', 'per-chunk', 'coalesced'] as const;
type Mode = (typeof MODES)[number];

const MODE_LABELS: Record<Mode, string> = {
  plain: 'no NOTIFY',
  notify: 'one NOTIFY per transaction',
  'per-chunk': '+ token streams, NOTIFY per chunk',
  coalesced: '+ token streams, coalesced',
};

interface Plan {
  clients: number;
  workflows: number;
  seconds: number;
  rounds: number;
  streams: number;
  tokenRate: number;
  tokenBytes: number;
  flushMs: number;
}

interface Fixture {
  db: Db;
  tokenDb: Db;
  tenantId: string;
  /** Workflows of each append client; no two clients share one. */
  clientWorkflows: string[][];
  streamWorkflows: string[];
  listener: Listener;
  log: Logger;
}

interface PhaseResult {
  txPerS: number;
  p50Ms: number;
  p99Ms: number;
  /** Token streams only. */
  tokenNotifiesPerS?: number;
  /** Share of the streamed text not yet delivered to the listener when the phase ended. */
  tokenBacklogPct?: number;
}

interface Results {
  /** Median over rounds. */
  byMode: Map<Mode, PhaseResult>;
  /** 1-minute load average before and after the rounds: other work on the machine skews the figures. */
  loadAverage: [number, number];
}

interface Listener {
  tokenNotifies: number;
  tokenBytes: number;
  close(): Promise<void>;
}

const ORIGIN = 'bench-emitter';

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      clients: { type: 'string', default: '8' },
      workflows: { type: 'string', default: '64' },
      seconds: { type: 'string', default: '3' },
      rounds: { type: 'string', default: '3' },
      streams: { type: 'string', default: '32' },
      'token-rate': { type: 'string', default: '80' },
      'token-bytes': { type: 'string', default: '5' },
      'flush-ms': { type: 'string', default: '50' },
    },
  });
  const plan: Plan = {
    clients: wholeNumber('--clients', values.clients, 1),
    workflows: wholeNumber('--workflows', values.workflows, 1),
    seconds: wholeNumber('--seconds', values.seconds, 1),
    rounds: wholeNumber('--rounds', values.rounds, 1),
    streams: wholeNumber('--streams', values.streams, 1),
    tokenRate: wholeNumber('--token-rate', values['token-rate'], 1),
    tokenBytes: wholeNumber('--token-bytes', values['token-bytes'], 1),
    flushMs: wholeNumber('--flush-ms', values['flush-ms'], 1),
  };
  if (plan.workflows < plan.clients) throw new Error('--workflows must be at least --clients');

  await runBenchmark(
    'notify-cost',
    (signal, cleanups) => benchmark(plan, signal, cleanups),
    (results) => printSummary(plan, results),
  );
}

async function benchmark(plan: Plan, signal: AbortSignal, cleanups: Cleanup[]): Promise<Results> {
  const embedded = await startBenchDatabase(cleanups, 'notify');
  // The services' pool is the append clients' pool: one connection each.
  const { services, bootstrap } = await startBenchServices(cleanups, {
    databaseUrl: embedded.url,
    env: { DATABASE_POOL_MAX: String(plan.clients) },
  });
  const { database, log } = services;
  const tokenDatabase = openDatabase({ url: embedded.url, poolMax: plan.streams, log });
  cleanups.push(() => tokenDatabase.close());
  const tenantId = bootstrap.tenant.id;

  const workflowIds = await insertRunningWorkflows(database.db, tenantId, plan.workflows);
  const clientWorkflows = Array.from({ length: plan.clients }, (_, client) =>
    workflowIds.filter((_id, index) => index % plan.clients === client),
  );
  const streamWorkflows = await insertRunningWorkflows(database.db, tenantId, plan.streams);
  const listener = await listen(embedded.url);
  cleanups.push(() => listener.close());

  const fixture: Fixture = {
    db: database.db,
    tokenDb: tokenDatabase.db,
    tenantId,
    clientWorkflows,
    streamWorkflows,
    listener,
    log,
  };
  // Warm-up: connections opened, plans cached, first WAL segments written.
  await runPhase(fixture, plan, 'notify', 1_000);

  const loadBefore = os.loadavg()[0] ?? Number.NaN;
  const byMode = new Map<Mode, PhaseResult[]>(MODES.map((mode) => [mode, []]));
  for (let round = 0; round < plan.rounds; round++) {
    // Each round in a different order, so no mode always follows another.
    const order = MODES.map((_mode, index) => MODES[(index + round) % MODES.length] as Mode);
    for (const mode of order) {
      if (signal.aborted) throw signal.reason;
      byMode.get(mode)?.push(await runPhase(fixture, plan, mode, plan.seconds * 1_000));
    }
  }
  return {
    byMode: new Map(MODES.map((mode) => [mode, medianResult(byMode.get(mode) ?? [])])),
    loadAverage: [loadBefore, os.loadavg()[0] ?? Number.NaN],
  };
}

async function insertRunningWorkflows(db: Db, tenantId: string, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await db
    .insertInto('workflows')
    .values(
      ids.map((id) => ({
        id,
        tenant_id: tenantId,
        status: 'running',
        mode: 'simple',
        model: 'bench',
        input: 'bench',
        tools: [],
        metadata: '{}',
        started_at: new Date(),
      })),
    )
    .execute();
  return ids;
}

/** One LISTEN connection counting the token text it receives, as a replica's hub would. */
async function listen(url: string): Promise<Listener> {
  const client = new pg.Client({ connectionString: url });
  const listener: Listener = {
    tokenNotifies: 0,
    tokenBytes: 0,
    close: () => client.end(),
  };
  client.on('notification', (message) => {
    const notification = message.payload ? parseNotification(message.payload) : undefined;
    if (notification?.kind !== 'tokens') return;
    listener.tokenNotifies++;
    listener.tokenBytes += Buffer.byteLength(notification.text);
  });
  await client.connect();
  await client.query(`LISTEN ${EVENTS_CHANNEL}`);
  return listener;
}

/** The transaction tracker.emit runs, with or without its NOTIFY. */
async function appendOne(fixture: Fixture, workflowId: string, withNotify: boolean): Promise<void> {
  await fixture.db.transaction().execute(async (tx) => {
    const events = workflowEventsRepository(tx);
    const [row] = await events.append({
      workflowId,
      tenantId: fixture.tenantId,
      events: [{ type: 'warning', step: 'bench', status: 'info', detail: {}, elapsedMs: null }],
    });
    if (!row) throw new Error('appending an event returned no row');
    if (withNotify) {
      await events.notify(
        notificationPayload({ kind: 'events', workflowId, lastSeq: row.seq, origin: ORIGIN }),
      );
    }
  });
}

async function runPhase(
  fixture: Fixture,
  plan: Plan,
  mode: Mode,
  durationMs: number,
): Promise<PhaseResult> {
  const streams =
    mode === 'per-chunk' || mode === 'coalesced'
      ? startTokenStreams(fixture, plan, mode === 'per-chunk' ? 0 : plan.flushMs)
      : undefined;
  const latenciesMs: number[] = [];
  const started = performance.now();
  const deadline = started + durationMs;
  await Promise.all(
    fixture.clientWorkflows.map(async (workflows) => {
      for (let n = 0; performance.now() < deadline; n++) {
        const workflowId = workflows[n % workflows.length] as string;
        const begun = performance.now();
        await appendOne(fixture, workflowId, mode !== 'plain');
        latenciesMs.push(performance.now() - begun);
      }
    }),
  );
  const elapsedS = (performance.now() - started) / 1_000;
  const sorted = latenciesMs.sort((a, b) => a - b);
  const result: PhaseResult = {
    txPerS: sorted.length / elapsedS,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
  };
  if (!streams) return result;
  const streamed = await streams.stop();
  return {
    ...result,
    tokenNotifiesPerS: streamed.notifies / elapsedS,
    tokenBacklogPct: (100 * streamed.undeliveredBytes) / Math.max(1, streamed.sentBytes),
  };
}

/**
 * `plan.streams` trackers, each fed one token every 1/tokenRate s like a
 * streaming model call. flushMs 0 still goes through the tracker's timer,
 * so tokens written in one tick share a NOTIFY, but at model rates every
 * token gets its own.
 */
function startTokenStreams(fixture: Fixture, plan: Plan, flushMs: number) {
  const hub = createEventHub({
    db: fixture.tokenDb,
    listenUrl: 'postgres://unused/unused',
    origin: ORIGIN,
    log: fixture.log,
  });
  const token = 'x'.repeat(plan.tokenBytes);
  const before = { notifies: fixture.listener.tokenNotifies, bytes: fixture.listener.tokenBytes };
  let sentBytes = 0;
  const trackers: WorkflowTracker[] = fixture.streamWorkflows.map((workflowId) =>
    createWorkflowTracker({
      db: fixture.tokenDb,
      hub,
      tenantId: fixture.tenantId,
      workflowId,
      origin: ORIGIN,
      log: fixture.log,
      tokenFlushMs: flushMs,
    }),
  );
  const timers = trackers.map((tracker) =>
    setInterval(() => {
      tracker.token(token);
      sentBytes += token.length;
    }, 1_000 / plan.tokenRate),
  );
  return {
    async stop() {
      for (const timer of timers) clearInterval(timer);
      const notifies = fixture.listener.tokenNotifies - before.notifies;
      const undeliveredBytes = sentBytes - (fixture.listener.tokenBytes - before.bytes);
      // Drain what is still queued before the next phase starts, then let
      // the listener see the last NOTIFYs.
      await Promise.all(trackers.map((tracker) => tracker.flushTokens()));
      for (const tracker of trackers) tracker.close();
      await new Promise((resolve) => setTimeout(resolve, 200));
      return { notifies, sentBytes, undeliveredBytes };
    },
  };
}

function medianResult(results: PhaseResult[]): PhaseResult {
  const median = (pick: (result: PhaseResult) => number | undefined) => {
    const values = results
      .map(pick)
      .filter((value): value is number => value !== undefined)
      .sort((a, b) => a - b);
    return values.length === 0 ? undefined : percentile(values, 50);
  };
  const tokenNotifiesPerS = median((result) => result.tokenNotifiesPerS);
  const tokenBacklogPct = median((result) => result.tokenBacklogPct);
  return {
    txPerS: median((result) => result.txPerS) ?? Number.NaN,
    p50Ms: median((result) => result.p50Ms) ?? Number.NaN,
    p99Ms: median((result) => result.p99Ms) ?? Number.NaN,
    ...(tokenNotifiesPerS === undefined ? {} : { tokenNotifiesPerS }),
    ...(tokenBacklogPct === undefined ? {} : { tokenBacklogPct }),
  };
}

function printSummary(plan: Plan, results: Results): void {
  const get = (mode: Mode) => results.byMode.get(mode) as PhaseResult;
  const plain = get('plain').txPerS;
  const notify = get('notify').txPerS;
  const wanted = plan.streams * plan.tokenRate;
  const lines = [
    `notify-cost: ${plan.clients} clients appending one event per transaction to ${plan.workflows} workflows; ` +
      `median of ${plan.rounds} rounds of ${plan.seconds} s per mode; ${os.cpus().length} CPUs, ` +
      `load average ${round(results.loadAverage[0], 2)} before, ${round(results.loadAverage[1], 2)} after`,
    `token streams: ${plan.streams} workflows at ${plan.tokenRate} tokens/s of ${plan.tokenBytes} bytes ` +
      `(${wanted} tokens/s in all); coalesced = every ${plan.flushMs} ms`,
  ];
  for (const mode of MODES) {
    const result = get(mode);
    let line = `  ${MODE_LABELS[mode].padEnd(36)} ${round(result.txPerS, 0).toString().padStart(6)} tx/s  p50 ${round(result.p50Ms, 2)} ms  p99 ${round(result.p99Ms, 2)} ms`;
    if (result.tokenNotifiesPerS !== undefined) {
      line += `  | token NOTIFYs ${round(result.tokenNotifiesPerS, 0)}/s, text undelivered at phase end ${round(result.tokenBacklogPct ?? 0, 1)}%`;
    }
    lines.push(line);
  }
  const overheadPct = (100 * (plain - notify)) / plain;
  lines.push(
    `  NOTIFY per transaction costs ${round(overheadPct, 1)}% of plain append throughput`,
    `bench notify-cost: ${JSON.stringify({
      tx_per_s_plain: round(plain, 0),
      tx_per_s_notify: round(notify, 0),
      notify_overhead_pct: round(overheadPct, 1),
      tx_per_s_tokens_per_chunk: round(get('per-chunk').txPerS, 0),
      tx_per_s_tokens_coalesced: round(get('coalesced').txPerS, 0),
    })}`,
    '',
  );
  process.stdout.write(lines.join('\n'));
}
