import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { commaList } from '../../src/config-values.js';
import { buildApp } from '../../src/http/app.js';
import { countRoundTrips, type RoundTripCounter } from '../support/db-roundtrips.js';
import { BENCH_MODEL, benchCatalogue, PROVIDER_KEY_ENV } from '../support/fake-catalogue.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { startLoadThread } from '../support/load-thread.js';
import { cpuBetween, machineCpu } from '../support/machine-cpu.js';
import { summarise, wholeNumber } from '../support/stats.js';
import { startFloorService } from './floor.js';
import {
  type LoadRequest,
  type SimplePathLoad,
  startSimplePathLoad,
  type TimedRun,
} from './load.js';
import { startBenchProvider, type TimeInside } from './provider.js';
import {
  HIGH_CONCURRENCY,
  type OverheadParts,
  type PhaseResult,
  type Plan,
  printSummary,
  type Results,
} from './summary.js';
import type { ServiceTarget } from './workload.js';

/**
 * End-to-end workflows per second on the simple path: each workflow is a
 * two-turn tool loop (the model calls `calculator`, then answers), started
 * with `POST /v1/workflows` and `Accept: text/event-stream`, its events read
 * until `workflow_end`. The fake provider (OpenAI wire format, streamed)
 * answers at once. Measured at concurrency 1 and 32, after a warm-up:
 *
 *   throughput   workflows finished per second of the phase;
 *   overhead     per workflow, its wall time minus the time spent inside the
 *                fake provider (request arrival to response end, summed over
 *                its two requests): what Waymark and the client cost; and
 *                its parts: before the first model request arrives, between
 *                the calls, after the last response ends;
 *   round trips  Postgres round trips per workflow, by statement kind (see
 *                bench/support/db-roundtrips.ts for how they are counted).
 *
 * By default everything runs in this process: an embedded PostgreSQL, the
 * real services and app on loopback in the main thread, and the load (the
 * fake provider and the clients) in a worker thread (load.ts), so the
 * service's event loop is its own, as it is with clients and a model
 * provider elsewhere; all of it shares the machine's 2 cores with
 * PostgreSQL. `--one-loop` puts the load on the service's event loop
 * instead (how it was measured before 2026-11-30). Parts can run elsewhere
 * instead:
 *
 *   --provider-url URL   the service talks to a fake running elsewhere (its
 *                        OpenAI base URL, e.g. http://127.0.0.1:4010/v1, as
 *                        `--serve-provider` prints); the time inside it is
 *                        unknown here, so the overhead is not reported
 *   --service-url URL[,URL...] --api-key KEY
 *                        drive a service started separately (`npm start`), whose
 *                        WAYMARK_MODELS points at this run's fake (start it on a
 *                        fixed --provider-port) or at --provider-url; several
 *                        URLs (replicas on one PostgreSQL) take the workflows
 *                        in turn; round trips are counted only in-process
 *   --serve-provider     only run the scripted fake on --provider-port and print
 *                        the WAYMARK_MODELS to start a service with, until Ctrl-C
 *   --floor              measure floor.ts instead of Waymark: the required parts
 *                        (Fastify, the OpenAI SDK, the same three statements)
 *                        doing the same work with none of Waymark's code
 *   --idempotency-keys   every create carries an Idempotency-Key (unique per
 *                        workflow), as a client that retries safely sends it
 *   --session-turns K    every workflow runs in a session, as a chat's turns do:
 *                        each client loop creates a session (POST /v1/sessions,
 *                        not timed) and asks K questions in it before the next
 *
 *   npm run bench -- simple-path [--workflows-c1 400] [--workflows-c32 3000]
 *     [--warmup 2000] [--warmup-c1 400] [--model bench] [--provider-port 0] [--provider-host 127.0.0.1]
 *     [--provider-url URL] [--service-url URL[,URL...] --api-key KEY] [--serve-provider] [--show-sql]
 *     [--synchronous-commit on|off] [--one-loop] [--floor] [--idempotency-keys] [--session-turns K]
 */

export async function run(args: string[]): Promise<void> {
  const plan = parsePlan(args);
  if (plan.serveProvider) {
    await runBenchmark(
      'simple-path',
      (signal, cleanups) => serveProvider(plan, signal, cleanups),
      () => {},
    );
    return;
  }
  await runBenchmark(
    'simple-path',
    (signal, cleanups) => benchmark(plan, signal, cleanups),
    printSummary,
  );
}

/**
 * Where each workflow's overhead falls, on the load thread's clock: from
 * sending the POST to the first model request's arrival, between the model
 * calls, and from the last response's end to reading `workflow_end`.
 */
function overheadParts(runs: TimedRun[]): OverheadParts {
  // A workflow that made no model request (a misconfigured run) has no parts.
  const part = (of: (run: TimedRun, inside: TimeInside) => number) =>
    summarise(
      runs.flatMap((run) => (run.inside && run.inside.requests > 0 ? [of(run, run.inside)] : [])),
    );
  return {
    beforeFirstCall: part((run, inside) => inside.firstArrivedAt - run.startedAt),
    betweenCalls: part((_run, inside) => inside.betweenMs),
    afterLastCall: part((run, inside) => run.startedAt + run.wallMs - inside.lastEndedAt),
  };
}

function parsePlan(args: string[]): Plan {
  const { values } = parseArgs({
    args,
    options: {
      'workflows-c1': { type: 'string', default: '400' },
      'workflows-c32': { type: 'string', default: '3000' },
      warmup: { type: 'string', default: '2000' },
      'warmup-c1': { type: 'string', default: '400' },
      model: { type: 'string' },
      'provider-port': { type: 'string', default: '0' },
      'provider-host': { type: 'string', default: '127.0.0.1' },
      'provider-url': { type: 'string' },
      'service-url': { type: 'string' },
      'api-key': { type: 'string' },
      'serve-provider': { type: 'boolean', default: false },
      'show-sql': { type: 'boolean', default: false },
      'synchronous-commit': { type: 'string', default: 'on' },
      'one-loop': { type: 'boolean', default: false },
      floor: { type: 'boolean', default: false },
      'idempotency-keys': { type: 'boolean', default: false },
      'session-turns': { type: 'string' },
    },
  });
  const serviceUrls = commaList(values['service-url'] ?? '');
  const apiKey = values['api-key'] ?? process.env.WAYMARK_API_KEY;
  const synchronousCommit = values['synchronous-commit'];
  if (synchronousCommit !== 'on' && synchronousCommit !== 'off') {
    throw new Error(`--synchronous-commit must be on or off, got "${synchronousCommit}"`);
  }
  if (
    values.floor &&
    (serviceUrls.length > 0 ||
      synchronousCommit === 'off' ||
      values['idempotency-keys'] ||
      values['session-turns'] !== undefined)
  ) {
    throw new Error(
      '--floor runs in-process with its own commits, no idempotency and no sessions: no --service-url, --synchronous-commit, --idempotency-keys or --session-turns',
    );
  }
  if (serviceUrls.length > 0 && !apiKey) {
    throw new Error(
      '--service-url needs --api-key (or WAYMARK_API_KEY) of a tenant of that service',
    );
  }
  return {
    workflowsC1: wholeNumber('--workflows-c1', values['workflows-c1'], 1),
    workflowsC32: wholeNumber('--workflows-c32', values['workflows-c32'], HIGH_CONCURRENCY),
    warmup: wholeNumber('--warmup', values.warmup, 0),
    warmupC1: wholeNumber('--warmup-c1', values['warmup-c1'], 0),
    model: values.model,
    providerPort: wholeNumber('--provider-port', values['provider-port'], 0),
    providerHost: values['provider-host'],
    providerUrl: values['provider-url'],
    service: serviceUrls.length > 0 && apiKey ? { urls: serviceUrls, apiKey } : undefined,
    serveProvider: values['serve-provider'],
    showSql: values['show-sql'],
    synchronousCommit,
    oneLoop: values['one-loop'],
    floor: values.floor,
    idempotencyKeys: values['idempotency-keys'],
    sessionTurns:
      values['session-turns'] === undefined
        ? undefined
        : wholeNumber('--session-turns', values['session-turns'], 1),
  };
}

async function serveProvider(plan: Plan, signal: AbortSignal, cleanups: Cleanup[]): Promise<void> {
  const provider = await startBenchProvider({ port: plan.providerPort, host: plan.providerHost });
  cleanups.push(() => provider.server.close());
  process.stdout.write(
    [
      `simple-path fake provider on ${provider.server.openaiBaseUrl} (OpenAI wire format); Ctrl-C stops it.`,
      'Start a service against it with:',
      `  ${PROVIDER_KEY_ENV}=sk-fake WAYMARK_MODELS='${benchCatalogue(provider.server.openaiBaseUrl)}' RATE_LIMIT_MAX=1000000 npm start`,
      `then drive it: npm run bench -- simple-path --provider-url ${provider.server.openaiBaseUrl} --service-url http://127.0.0.1:8080 --api-key <key>`,
      '',
    ].join('\n'),
  );
  await new Promise<void>((resolve) =>
    signal.addEventListener('abort', () => resolve(), { once: true }),
  );
}

async function benchmark(plan: Plan, signal: AbortSignal, cleanups: Cleanup[]): Promise<Results> {
  const load = await startLoad(plan, signal, cleanups);
  const cpu = machineCpu({ loadTaskId: load.taskId });
  const providerUrl = plan.providerUrl ?? load.providerUrl ?? '';

  let target: ServiceTarget;
  let counter: RoundTripCounter | undefined;
  if (plan.service) {
    target = { baseUrls: plan.service.urls, apiKey: plan.service.apiKey, model: plan.model };
  } else {
    target = plan.floor
      ? await startFloorService(cleanups, { providerUrl })
      : await startService(cleanups, {
          providerUrl,
          model: plan.model ?? BENCH_MODEL,
          synchronousCommit: plan.synchronousCommit,
        });
    counter = countRoundTrips();
    const installed = counter;
    cleanups.push(async () => installed.restore());
  }
  // Unique to this run, so a service that outlives it never replays an earlier run's workflow.
  if (plan.idempotencyKeys) target = { ...target, idempotencyKeyPrefix: randomUUID() };
  if (plan.sessionTurns !== undefined) target = { ...target, sessionTurns: plan.sessionTurns };
  // Pushed last, so run first: idle keep-alive sockets would otherwise hold app.close().
  cleanups.push(() => load.close());

  let next = 1;
  const phase = async (count: number, concurrency: number) => {
    const first = next;
    next += count;
    return load.run({ target, first, count, concurrency });
  };

  // One workflow first, so a broken setup fails loudly instead of timing errors.
  const [checked] = (await phase(1, 1)).runs;
  if (checked?.inside && checked.inside.requests !== 2) {
    throw new Error(`the first workflow made ${checked.inside.requests} model calls, not 2`);
  }
  // The steady state of a long-running service: after 300 warm-up workflows
  // V8 was still optimising functions (~20 a second) for tens of seconds, its
  // helper threads taking ~2 ms of CPU per workflow at concurrency 1 (0.6-0.9
  // ms after 2,000), and concurrency 1's overhead p50 read ~1 ms higher
  // (runs alternated, 2026-12-01).
  await phase(plan.warmup, HIGH_CONCURRENCY);
  // Then at concurrency 1, whose paths concurrency 32 does not take (a
  // workflow's writes go alone rather than in batches, its run starts
  // before its insert has answered): after the warm-up at 32 alone, V8
  // optimised 112 functions during the 400 measured workflows at 1
  // (`--trace-opt`: compareAndSet, the insert, the statements' execution,
  // the turn's state among them) against 64 after 400 more at 1; and in
  // four runs measuring three blocks of 400 in a row, the first read
  // 3.62, 3.55, 2.94 and 3.54 ms p50, the next two 3.22/3.20, 3.11/3.23,
  // 2.94/3.10 and 2.95/2.78 (2026-12-02).
  if (plan.warmupC1 > 0) await phase(plan.warmupC1, 1);

  const measure = async (count: number, concurrency: number): Promise<PhaseResult> => {
    if (signal.aborted) throw signal.reason;
    counter?.reset();
    const cpuBefore = process.cpuUsage();
    const partsBefore = cpu.read();
    const loopBefore = performance.eventLoopUtilization();
    const { runs, elapsedMs } = await phase(count, concurrency);
    const loop = performance.eventLoopUtilization(loopBefore);
    const partsAfter = cpu.read();
    const processCpu = process.cpuUsage(cpuBefore);
    // Settle: the ledger flush trails the workflows.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const inside = runs.every((one) => one.inside !== undefined);
    return {
      concurrency,
      workflows: runs.length,
      wps: (runs.length / elapsedMs) * 1000,
      wallMs: summarise(runs.map((one) => one.wallMs)),
      insideProviderMs: inside ? summarise(runs.map((one) => one.inside?.ms ?? 0)) : undefined,
      overheadMs: inside
        ? summarise(runs.map((one) => one.wallMs - (one.inside?.ms ?? 0)))
        : undefined,
      overheadParts: inside ? overheadParts(runs) : undefined,
      statements: counter?.snapshot(),
      cpuMsPerWorkflow: (processCpu.user + processCpu.system) / 1000 / runs.length,
      cpuParts: partsBefore && partsAfter ? cpuBetween(partsBefore, partsAfter) : undefined,
      eventLoopUtilization: loop.utilization,
    };
  };
  const c1 = await measure(plan.workflowsC1, 1);
  const c32 = await measure(plan.workflowsC32, HIGH_CONCURRENCY);
  const stray = await load.stray();
  if (stray > 0) throw new Error(`${stray} model calls carried no bench question`);

  const where = [
    plan.service
      ? `service at ${plan.service.urls.join(', ')}`
      : plan.floor
        ? 'the floor in-process (floor.ts, not Waymark; embedded PostgreSQL)'
        : `service in-process (embedded PostgreSQL, synchronous_commit ${plan.synchronousCommit})`,
    plan.providerUrl ? `fake provider at ${plan.providerUrl}` : 'fake provider in-process',
    plan.oneLoop
      ? 'clients and fake on the service’s event loop (--one-loop)'
      : 'clients and fake in a worker thread',
  ].join(', ');
  return { plan, where, c1, c32 };
}

/** The clients and the fake: in a worker thread, or (`--one-loop`) in this one. */
async function startLoad(
  plan: Plan,
  signal: AbortSignal,
  cleanups: Cleanup[],
): Promise<SimplePathLoad> {
  const provider = plan.providerUrl
    ? undefined
    : { port: plan.providerPort, host: plan.providerHost };
  if (plan.oneLoop) {
    return startSimplePathLoad({ provider, maxSockets: HIGH_CONCURRENCY, signal });
  }
  const thread = startLoadThread(new URL('./load.ts', import.meta.url));
  cleanups.push(() => thread.close());
  const started = await thread.call<{
    providerUrl: string | undefined;
    taskId: number | undefined;
  }>({
    kind: 'start',
    provider,
    maxSockets: HIGH_CONCURRENCY,
  } satisfies LoadRequest);
  return {
    providerUrl: started.providerUrl,
    taskId: started.taskId,
    run: (input) =>
      thread.call<{ runs: TimedRun[]; elapsedMs: number }>({
        kind: 'run',
        ...input,
      } satisfies LoadRequest),
    stray: () => thread.call<number>({ kind: 'stray' } satisfies LoadRequest),
    close: async () => {
      await thread.call<null>({ kind: 'close' } satisfies LoadRequest);
    },
  };
}

/** The real services and app over a fresh embedded PostgreSQL, as main.ts starts them. */
async function startService(
  cleanups: Cleanup[],
  options: { providerUrl: string; model: string; synchronousCommit: 'on' | 'off' },
): Promise<ServiceTarget> {
  const { providerUrl, model } = options;
  const embedded = await startBenchDatabase(cleanups, 'simple-path');
  const { services, bootstrap } = await startBenchServices(cleanups, {
    databaseUrl: embedded.url,
    env: {
      [PROVIDER_KEY_ENV]: 'sk-fake',
      WAYMARK_MODELS: benchCatalogue(providerUrl),
      // 1,000,000 is the most RATE_LIMIT_MAX accepts, far above what one run sends.
      RATE_LIMIT_MAX: '1000000',
    },
  });
  if (options.synchronousCommit === 'off') {
    // For the whole server and after a reload, so the connections already pooled get it too.
    await services.database.pool.query('ALTER SYSTEM SET synchronous_commit = off');
    await services.database.pool.query('SELECT pg_reload_conf()');
  }
  await services.hub.start();
  services.retention.start();
  const app = await buildApp(services);
  cleanups.push(() => app.close());
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  return { baseUrls: [baseUrl], apiKey: bootstrap.adminKey.secret, model };
}
