import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { type Pgbouncer, pgbouncerForTests, startPgbouncer } from '../support/pgbouncer.js';
import { printedBootstrapKeys, type WaymarkProcess, waymarkProcesses } from '../support/process.js';
import { hangingReply, replicaEnv } from '../support/replica-cluster.js';
import { answer } from '../support/tool-loop-harness.js';
import { waitFor } from '../support/workflows.js';

/**
 * A replica behind a PgBouncer with no server connection to give: its one
 * server connection is held by another client's open transaction, and a
 * statement that waits for it past `query_wait_timeout` is refused with a
 * FATAL 08P01 "query_wait_timeout". That is the database out of reach for
 * now, as a refused connection is: a request answers 503 with Retry-After,
 * and a run's write hands its workflow over to be resumed, rather than a
 * 500 and a workflow failed with an internal error.
 *
 * Needs the `pgbouncer` package; under CI the test fails without it, else
 * it is skipped and says why.
 */

const binary = pgbouncerForTests('test/e2e/pgbouncer-saturated.test.ts');

const processes = waymarkProcesses();
let provider: FakeProviderServer;
let bouncer: Pgbouncer | undefined;
let database: TestDatabase | undefined;
let dataDir: string | undefined;
let replica: WaymarkProcess;
let key: string;
let holder: pg.Client | undefined;

function call(route: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${key}`);
  if (init.body !== undefined) headers.set('content-type', 'application/json');
  return fetch(`${replica.url}${route}`, { ...init, headers, signal: AbortSignal.timeout(20_000) });
}

/** Takes PgBouncer's only server connection, in a transaction left open until `release`. */
async function holdTheServerConnection(): Promise<void> {
  holder = new pg.Client({ connectionString: bouncer?.urlFor(database?.url ?? '') });
  await holder.connect();
  await holder.query('BEGIN');
  await holder.query('SELECT 1');
}

async function release(): Promise<void> {
  const client = holder;
  holder = undefined;
  if (!client) return;
  await client.query('COMMIT');
  await client.end();
}

describe.skipIf(!binary)('a replica behind a saturated PgBouncer', () => {
  beforeAll(async () => {
    provider = await startFakeProviderServer();
    bouncer = await startPgbouncer({
      binary: binary as string,
      serverUrl: inject('testDatabaseAdminUrl'),
      poolSize: 1,
      queryWaitTimeoutSeconds: 1,
    });
    database = await createTestDatabase({ migrated: false });
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-pgbouncer-saturated-'));
    replica = await processes.start({
      env: {
        ...replicaEnv(provider, bouncer.urlFor(database.url), dataDir),
        DATABASE_LISTEN_URL: database.url,
      },
    });
    await replica.waitUntilReady(60_000);
    key = printedBootstrapKeys(replica.stdout())[0] as string;
  });

  afterEach(release);

  afterAll(async () => {
    await release();
    await processes.killAll();
    await provider?.close();
    await bouncer?.stop();
    await database?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('a request whose statement PgBouncer gives up on answers 503 database_unavailable with Retry-After, and the next one once it is free succeeds', async () => {
    await holdTheServerConnection();
    const refused = await call('/v1/workflows');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await refused.json()).toMatchObject({ code: 'database_unavailable' });

    await release();
    expect((await call('/v1/workflows')).status).toBe(200);
  }, 60_000);

  it('a run whose write PgBouncer gives up on hands its workflow over, and it is resumed and completes once the pooler is free', async () => {
    const hanging = hangingReply(['Par', 'is.']);
    // The first run's reply hangs until the pooler is saturated; the resumed run asks again.
    provider.enqueue(hanging.reply, answer('Paris.'));
    const created = await call('/v1/workflows', {
      method: 'POST',
      body: JSON.stringify({ input: 'Capital of France?', mode: 'simple' }),
    });
    expect(created.status, await created.clone().text()).toBe(202);
    const { id } = (await created.json()) as { id: string };
    await hanging.started;

    await holdTheServerConnection();
    // The reply ends: the run writes its answer, which waits for the held connection and is refused.
    hanging.release();
    await replica.waitForStdout(/a database statement failed for now/, 20_000);

    await release();
    const ended = await waitFor(
      async () => {
        const response = await call(`/v1/workflows/${id}`);
        if (response.status !== 200) return undefined;
        const workflow = (await response.json()) as { status: string; result?: unknown };
        return workflow.status === 'running' || workflow.status === 'queued' ? undefined : workflow;
      },
      `workflow ${id} to end`,
      30_000,
    );
    expect(ended.status).toBe('completed');
    expect(JSON.stringify(ended.result)).toContain('Paris');
    expect(replica.stdout()).not.toContain('the workflow run failed');
  }, 90_000);
});
