import http from 'node:http';
import { parseArgs } from 'node:util';
import { buildApp } from '../../src/http/app.js';
import {
  type Cleanup,
  runBenchmark,
  startBenchDatabase,
  startBenchServices,
} from '../support/harness.js';
import { percentile, round, wholeNumber } from '../support/stats.js';

/**
 * Authenticated `GET /v1/me` over real HTTP on keep-alive connections: the
 * floor every /v1 request pays (routing, the bearer-key lookup in Postgres,
 * the rate limiter, response serialisation). The server is the real app on
 * an embedded PostgreSQL with the default pool; the rate limit is raised out
 * of the way and logging is silent, so neither is measured.
 *
 * The load generator runs in the same process as the server and takes its
 * share of the one event loop, so the numbers are a floor for comparing
 * changes on one machine, not a capacity figure.
 *
 *   npm run bench -- auth [--requests 5000] [--concurrency 16] [--warmup 500]
 */

interface LoadOptions {
  agent: http.Agent;
  url: URL;
  headers: Record<string, string>;
  requests: number;
  concurrency: number;
  signal: AbortSignal;
}

interface HttpAnswer {
  status: number;
  body: string;
}

interface Summary {
  requests: number;
  concurrency: number;
  rps: number;
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      requests: { type: 'string', default: '5000' },
      concurrency: { type: 'string', default: '16' },
      warmup: { type: 'string', default: '500' },
    },
  });
  const requests = wholeNumber('--requests', values.requests, 1);
  const concurrency = wholeNumber('--concurrency', values.concurrency, 1);
  const warmup = wholeNumber('--warmup', values.warmup, 0);

  await runBenchmark(
    'auth',
    (signal, cleanups) => benchmark({ requests, concurrency, warmup }, signal, cleanups),
    (summary) => printSummary(summary, warmup),
  );
}

async function benchmark(
  plan: { requests: number; concurrency: number; warmup: number },
  signal: AbortSignal,
  cleanups: Cleanup[],
): Promise<Summary> {
  const embedded = await startBenchDatabase(cleanups, 'auth');
  const { services, bootstrap } = await startBenchServices(cleanups, {
    databaseUrl: embedded.url,
    // 1,000,000 is the most RATE_LIMIT_MAX accepts, far above what one run sends.
    env: { RATE_LIMIT_MAX: '1000000' },
  });

  const app = await buildApp(services);
  cleanups.push(() => app.close());
  const address = await app.listen({ host: '127.0.0.1', port: 0 });

  const agent = new http.Agent({ keepAlive: true, maxSockets: plan.concurrency });
  cleanups.push(async () => agent.destroy());
  const load = {
    agent,
    url: new URL('/v1/me', address),
    headers: { authorization: `Bearer ${bootstrap.adminKey.secret}` },
    concurrency: plan.concurrency,
    signal,
  };
  await assertAuthenticatesAs(load, bootstrap.adminKey.apiKey.id);
  await sendLoad({ ...load, requests: plan.warmup });
  const started = performance.now();
  const latenciesMs = await sendLoad({ ...load, requests: plan.requests });
  const elapsedMs = performance.now() - started;
  return summarise(latenciesMs, elapsedMs, plan.concurrency);
}

/** One request first, so a broken setup fails loudly instead of timing 401s. */
async function assertAuthenticatesAs(
  load: Pick<LoadOptions, 'agent' | 'url' | 'headers'>,
  keyId: string,
): Promise<void> {
  const response = await get(load);
  const body = response.status === 200 ? (JSON.parse(response.body) as unknown) : undefined;
  const seenKeyId = (body as { apiKey?: { id?: unknown } } | undefined)?.apiKey?.id;
  if (seenKeyId !== keyId) {
    throw new Error(`GET /v1/me answered ${response.status}: ${response.body.slice(0, 500)}`);
  }
}

/**
 * `requests` GETs from `concurrency` loops that each wait for their answer
 * before sending the next; returns each request's latency. The first failure
 * stops every loop and is thrown once they have all stopped.
 */
async function sendLoad(options: LoadOptions): Promise<Float64Array> {
  const latenciesMs = new Float64Array(options.requests);
  const failed = new AbortController();
  const signal = AbortSignal.any([options.signal, failed.signal]);
  let next = 0;
  const loop = async (): Promise<void> => {
    while (!signal.aborted) {
      const index = next++;
      if (index >= options.requests) return;
      const started = performance.now();
      try {
        // Not aborted mid-flight: an interrupt lets the requests in flight
        // finish (milliseconds), then every loop stops here.
        const response = await get(options);
        if (response.status !== 200) {
          throw new Error(`GET /v1/me answered ${response.status}: ${response.body.slice(0, 500)}`);
        }
      } catch (error) {
        failed.abort(error);
        return;
      }
      latenciesMs[index] = performance.now() - started;
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, loop));
  if (signal.aborted) throw signal.reason;
  return latenciesMs;
}

function get(options: Pick<LoadOptions, 'agent' | 'url' | 'headers'>): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const request = http.get(
      options.url,
      { agent: options.agent, headers: options.headers },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          body += chunk;
        });
        response.once('end', () => resolve({ status: response.statusCode ?? 0, body }));
        response.once('error', reject);
      },
    );
    request.once('error', reject);
  });
}

function summarise(latenciesMs: Float64Array, elapsedMs: number, concurrency: number): Summary {
  const sorted = latenciesMs.slice().sort();
  return {
    requests: sorted.length,
    concurrency,
    rps: round((sorted.length / elapsedMs) * 1000, 1),
    p50_ms: round(percentile(sorted, 50), 3),
    p95_ms: round(percentile(sorted, 95), 3),
    p99_ms: round(percentile(sorted, 99), 3),
  };
}

function printSummary(summary: Summary, warmup: number): void {
  process.stdout.write(
    [
      `GET /v1/me: ${summary.requests} requests at concurrency ${summary.concurrency}, after ${warmup} warm-up requests`,
      `  requests/s  ${summary.rps}`,
      `  p50         ${summary.p50_ms} ms`,
      `  p95         ${summary.p95_ms} ms`,
      `  p99         ${summary.p99_ms} ms`,
      // The one line scripts parse: keep it last and its keys stable.
      `bench auth: ${JSON.stringify(summary)}`,
      '',
    ].join('\n'),
  );
}
