import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { buildApp } from '../../src/http/app.js';
import { countRoundTrips } from '../support/db-roundtrips.js';
import { BENCH_MODEL, benchCatalogue, PROVIDER_KEY_ENV } from '../support/fake-catalogue.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { summarise, wholeNumber } from '../support/stats.js';
import {
  postAction,
  type ServiceTarget,
  startStreamedWorkflow,
  type WorkflowStream,
} from './client.js';
import { benchQuestion, type PlanShape, stageId, startBenchProvider } from './provider.js';
import { compactedRelationBytes, ownBytes, rowBytes, walPosition } from './storage.js';
import { type ContinueSample, printSummary, type Results, type SizeResult } from './summary.js';
import { type Commit, createWindows, observeCommits, type Windows } from './windows.js';

/**
 * The pipeline (complex path) end to end, in one process: the real
 * services and app over an embedded PostgreSQL on loopback, the fake
 * provider answering every model call at once, and HTTP/SSE clients.
 *
 * 1. Continue latency: `--workflows` workflows with a 5-stage plan whose
 *    stage 3 is a checkpoint, one at a time after `--warmup` more. Each is
 *    started with `POST /v1/workflows` and `Accept: text/event-stream`;
 *    once its `checkpoint` frame arrived (and `--review-delay-ms` passed),
 *    the clock starts just before `POST /v1/workflows/:id/continue` is sent
 *    and stops when the client has parsed stage 4's `stage` `started`
 *    frame. The service side is split where the `review` event (the
 *    continue's transaction) and the `started` event committed (windows.ts).
 * 2. Database cost per stage: Postgres round trips in the windows from one
 *    stage's `started` commit to the next one's (stages 1→2, 2→3 and 4→5 of
 *    those workflows; 3→4 spans the pause), counted by wrapping pg's query
 *    in this process (bench/support/db-roundtrips.ts, windows.ts); the
 *    continue path's window runs from sending `continue` to stage 4's
 *    `started` commit.
 * 3. Storage: one workflow per `--sizes` plan size (no checkpoint), after
 *    a CHECKPOINT so that each starts its WAL alike; its rows' bytes and the
 *    WAL it wrote (storage.ts); bytes per stage as summary.ts explains.
 *
 * Everything shares one event loop (clients, fake and service), so the
 * latency is a floor to compare changes against, not a capacity figure.
 *
 *   npm run bench -- pipeline [--workflows 200] [--warmup 20] [--sizes 10,50,200]
 *     [--review-delay-ms 0] [--show-sql]
 */

/** The latency workflows' plan: 5 stages, stage 3 pauses for review. */
const CHECKPOINT_SHAPE: PlanShape = { stages: 5, checkpointAt: 3 };
/** Output tokens of the bench model: enough for the largest plan the sizes ask for. */
const PLAN_MAX_OUTPUT_TOKENS = 32_768;
/** Long enough for the usage ledger's batched flush (every 250 ms) to have written a workflow's calls. */
const LEDGER_SETTLE_MS = 400;

interface Plan {
  workflows: number;
  warmup: number;
  sizes: number[];
  reviewDelayMs: number;
  showSql: boolean;
}

export async function run(args: string[]): Promise<void> {
  const plan = parsePlan(args);
  await runBenchmark(
    'pipeline',
    (signal, cleanups) => benchmark(plan, signal, cleanups),
    printSummary,
  );
}

function parsePlan(args: string[]): Plan {
  const { values } = parseArgs({
    args,
    options: {
      workflows: { type: 'string', default: '200' },
      warmup: { type: 'string', default: '20' },
      sizes: { type: 'string', default: '10,50,200' },
      'review-delay-ms': { type: 'string', default: '0' },
      'show-sql': { type: 'boolean', default: false },
    },
  });
  const sizes = [
    ...new Set(values.sizes.split(',').map((size) => wholeNumber('--sizes', size.trim(), 1))),
  ].sort((a, b) => a - b);
  // Two points always lie on a line: the linearity check needs a third.
  if (sizes.length < 3) throw new Error('--sizes needs at least three plan sizes, e.g. 10,50,200');
  if (sizes.some((size) => size > 500)) {
    throw new Error('--sizes: a plan has at most 500 stages (PIPELINE_MAX_STAGES)');
  }
  return {
    workflows: wholeNumber('--workflows', values.workflows, 1),
    warmup: wholeNumber('--warmup', values.warmup, 0),
    sizes,
    reviewDelayMs: wholeNumber('--review-delay-ms', values['review-delay-ms'], 0),
    showSql: values['show-sql'],
  };
}

/** What the commit listener tracks of the one workflow running now. */
interface Tracking {
  shape: PlanShape;
  /** Label of the per-stage windows; undefined: none (warm-up). */
  windowLabel: string | undefined;
  reviewCommittedAt: number | undefined;
  /** `started` commit times by stage id, in commit order. */
  stageStarts: Map<string, number>;
}

/** Closes the window open and opens the next one as the running workflow's stages start. */
function onCommit(windows: Windows, current: Tracking | undefined, commit: Commit): void {
  if (!current) return;
  const { event, at } = commit;
  if (event.type === 'review') current.reviewCommittedAt = at;
  if (event.type !== 'stage' || event.status !== 'started' || event.step === null) return;
  current.stageStarts.set(event.step, at);
  windows.close();
  const stage = Number(/(\d+)$/.exec(event.step)?.[1]);
  const { stages, checkpointAt } = current.shape;
  // None over the pause (that one is the continue's), none after the last stage (the synthesis follows).
  if (current.windowLabel && stage < stages && stage !== checkpointAt) {
    windows.open(current.windowLabel);
  }
}

/** Everything one run of the bench started, for its two phases. */
interface Bench {
  target: ServiceTarget;
  windows: Windows;
  /** The bench's own connection, for storage figures; used only between workflows. */
  inspector: pg.Client;
  signal: AbortSignal;
  /** Numbers the workflows' questions. */
  next: () => number;
  track: (tracking: Tracking | undefined) => void;
}

async function benchmark(plan: Plan, signal: AbortSignal, cleanups: Cleanup[]): Promise<Results> {
  const provider = await startBenchProvider();
  cleanups.push(() => provider.server.close());
  const embedded = await startBenchDatabase(cleanups, 'pipeline');
  const { services, bootstrap } = await startBenchServices(cleanups, {
    databaseUrl: embedded.url,
    env: {
      [PROVIDER_KEY_ENV]: 'sk-fake',
      // The 200-stage plan is ~40,000 characters: 512 tokens could not hold it.
      WAYMARK_MODELS: benchCatalogue(provider.server.openaiBaseUrl, PLAN_MAX_OUTPUT_TOKENS),
      // 1,000,000 is the most RATE_LIMIT_MAX accepts, far above what one run sends.
      RATE_LIMIT_MAX: '1000000',
      PIPELINE_MAX_STAGES: String(Math.max(CHECKPOINT_SHAPE.stages, ...plan.sizes)),
    },
  });
  // As main.ts starts them: their background statements are what a stage shares the database with.
  await services.hub.start();
  services.retention.start();
  services.reclaimer.start();
  const app = await buildApp(services);
  cleanups.push(() => app.close());
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });

  const counter = countRoundTrips();
  cleanups.push(async () => counter.restore());
  const windows = createWindows(counter);
  let tracking: Tracking | undefined;
  const restoreHub = observeCommits(services.hub, (commit) => onCommit(windows, tracking, commit));
  cleanups.push(async () => restoreHub());
  const inspector = new pg.Client({ connectionString: embedded.url });
  await inspector.connect();
  cleanups.push(() => inspector.end());
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  // Pushed last, so run first: idle keep-alive sockets would otherwise hold app.close().
  cleanups.push(async () => agent.destroy());

  let n = 0;
  const bench: Bench = {
    target: { baseUrl, apiKey: bootstrap.adminKey.secret, model: BENCH_MODEL, agent },
    windows,
    inspector,
    signal,
    next: () => ++n,
    track: (next) => {
      tracking = next;
    },
  };
  for (let index = 0; index < plan.warmup; index += 1) {
    await runCheckpointWorkflow(bench, { measured: false, reviewDelayMs: plan.reviewDelayMs });
  }
  const samples: ContinueSample[] = [];
  for (let index = 0; index < plan.workflows; index += 1) {
    samples.push(
      await runCheckpointWorkflow(bench, { measured: true, reviewDelayMs: plan.reviewDelayMs }),
    );
  }
  const sizes: SizeResult[] = [];
  const largest = plan.sizes.at(-1);
  for (const stages of plan.sizes) sizes.push(await runSized(bench, stages, stages === largest));
  if (provider.strayPlans() > 0) {
    throw new Error(`${provider.strayPlans()} planning requests carried no bench question`);
  }
  return {
    warmup: plan.warmup,
    reviewDelayMs: plan.reviewDelayMs,
    showSql: plan.showSql,
    samples,
    stage: windows.totals('stage'),
    continuePath: windows.totals('continue'),
    sizes,
  };
}

/** Starts a workflow of `shape` and has the commit listener track it while `body` runs. */
async function withWorkflow<T>(
  bench: Bench,
  tracking: Tracking,
  body: (stream: WorkflowStream) => Promise<T>,
): Promise<T> {
  if (bench.signal.aborted) throw bench.signal.reason;
  bench.track(tracking);
  const stream = startStreamedWorkflow(bench.target, {
    input: benchQuestion(bench.next(), tracking.shape),
    mode: 'complex',
    model: BENCH_MODEL,
  });
  try {
    const result = await body(stream);
    await stream.ended;
    return result;
  } catch (error) {
    stream.destroy();
    throw error;
  } finally {
    bench.windows.close();
    bench.track(undefined);
  }
}

/** One workflow paused at its checkpoint and continued; the continue's timings. */
function runCheckpointWorkflow(
  bench: Bench,
  options: { measured: boolean; reviewDelayMs: number },
): Promise<ContinueSample> {
  const tracking: Tracking = {
    shape: CHECKPOINT_SHAPE,
    windowLabel: options.measured ? 'stage' : undefined,
    reviewCommittedAt: undefined,
    stageStarts: new Map(),
  };
  return withWorkflow(bench, tracking, async (stream) => {
    const paused = await stream.waitFor(
      (event) => event.type === 'checkpoint' && event.status === 'paused',
    );
    // Stage ids count from 1, so the stage after the checkpoint has the checkpoint's index.
    const next = stageId(CHECKPOINT_SHAPE.checkpointAt);
    const startedNext = stream.waitFor(
      (event) => event.type === 'stage' && event.status === 'started' && event.step === next,
    );
    if (options.reviewDelayMs > 0) await sleep(options.reviewDelayMs);
    if (options.measured) bench.windows.open('continue');
    const sentAt = performance.now();
    const repliedAt = await postAction(bench.target, paused.event.workflowId, 'continue');
    const arrived = await startedNext;
    const startedCommittedAt = tracking.stageStarts.get(next);
    if (tracking.reviewCommittedAt === undefined || startedCommittedAt === undefined) {
      throw new Error('the service committed no review or no started event for the continue');
    }
    return {
      sentAt,
      repliedAt,
      reviewCommittedAt: tracking.reviewCommittedAt,
      startedCommittedAt,
      arrivedAt: arrived.at,
    };
  });
}

/** One workflow of `stages` stages without a checkpoint, and what it stored and logged. */
async function runSized(bench: Bench, stages: number, physical: boolean): Promise<SizeResult> {
  const { inspector } = bench;
  const label = `stage@${stages}`;
  const tracking: Tracking = {
    shape: { stages, checkpointAt: 0 },
    windowLabel: label,
    reviewCommittedAt: undefined,
    stageStarts: new Map(),
  };
  const physicalBefore = physical ? await compactedRelationBytes(inspector) : 0;
  // Each workflow starts right after a checkpoint, so each logs the same full-page images.
  await inspector.query('CHECKPOINT');
  const walBefore = await walPosition(inspector);
  const workflowId = await withWorkflow(
    bench,
    tracking,
    async (stream) => (await stream.waitFor(() => true)).event.workflowId,
  );
  await sleep(LEDGER_SETTLE_MS);
  const walBytes = Number((await walPosition(inspector)) - walBefore);
  const tables = await rowBytes(inspector, workflowId);
  const physicalBytes = physical
    ? (await compactedRelationBytes(inspector)) - physicalBefore
    : undefined;
  const starts = [...tracking.stageStarts.values()];
  return {
    stages,
    tables,
    bytes: ownBytes(tables),
    walBytes,
    stageIntervalMs: summarise(starts.slice(1).map((at, index) => at - (starts[index] ?? at))),
    roundTrips: bench.windows.totals(label),
    physicalBytes,
  };
}
