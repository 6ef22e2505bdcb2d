import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { readMigrations } from '../../src/store/migrate.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { openStream, within } from '../support/event-streams.js';
import { type Pgbouncer, pgbouncerForTests, startPgbouncer } from '../support/pgbouncer.js';
import { planReply, stage } from '../support/pipeline-http.js';
import {
  freePorts,
  printedBootstrapKeys,
  type WaymarkProcess,
  waymarkProcesses,
} from '../support/process.js';
import { hangingReply, replicaEnv } from '../support/replica-cluster.js';
import { answer, callsTo, toolResultsOf } from '../support/tool-loop-harness.js';
import { waitFor } from '../support/workflows.js';

/**
 * Two real replicas whose DATABASE_URL goes through a real PgBouncer in
 * transaction mode (DATABASE_LISTEN_URL direct, DATABASE_PREPARED_STATEMENTS
 * left at `auto`, so off), as README's "Operating it" says operators run
 * them. PgBouncer has two server connections for the database and hands
 * them out round robin, so the replicas' twenty pooled connections share
 * them and a client's consecutive transactions land on different sessions:
 * whatever relies on session state between statements breaks here.
 *
 * Needs the `pgbouncer` package; under CI the test fails without it, else
 * it is skipped and says why.
 */

const binary = pgbouncerForTests('test/e2e/pgbouncer.test.ts');

/** Server connections PgBouncer keeps for the database: fewer than either replica's pool. */
const SERVER_CONNECTIONS = 2;

const processes = waymarkProcesses();
let provider: FakeProviderServer;
let bouncer: Pgbouncer | undefined;
let database: TestDatabase | undefined;
const dataDirs: string[] = [];
let a: WaymarkProcess;
let b: WaymarkProcess;
let key: string;

async function direct<T extends pg.QueryResultRow>(text: string, values: unknown[] = []) {
  const client = new pg.Client({ connectionString: database?.url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

function call(replica: WaymarkProcess, route: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${key}`);
  if (init.body !== undefined) headers.set('content-type', 'application/json');
  return fetch(`${replica.url}${route}`, {
    ...init,
    headers,
    signal: AbortSignal.timeout(20_000),
  });
}

async function post(
  replica: WaymarkProcess,
  route: string,
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<Response> {
  return call(replica, route, { method: 'POST', body: JSON.stringify(body), headers });
}

async function create(replica: WaymarkProcess, body: Record<string, unknown>): Promise<string> {
  const created = await post(replica, '/v1/workflows', body);
  expect(created.status, await created.clone().text()).toBe(202);
  return ((await created.json()) as { id: string }).id;
}

interface WorkflowView {
  id: string;
  status: string;
  version: number;
  awaitingReason?: string | null;
  [field: string]: unknown;
}

async function workflow(replica: WaymarkProcess, id: string): Promise<WorkflowView> {
  const response = await call(replica, `/v1/workflows/${id}`);
  expect(response.status).toBe(200);
  return (await response.json()) as WorkflowView;
}

async function until(
  replica: WaymarkProcess,
  id: string,
  statuses: string[],
): Promise<WorkflowView> {
  return waitFor(
    async () => {
      const seen = await workflow(replica, id);
      return statuses.includes(seen.status) ? seen : undefined;
    },
    `workflow ${id} to be ${statuses.join(' or ')}`,
    30_000,
  );
}

/** The frames of a whole SSE body that carry an id (persisted events). */
function sseEvents(body: string): WorkflowEvent[] {
  return body
    .split('\n\n')
    .map((block) => block.split('\n').find((line) => line.startsWith('data: ')))
    .filter((line): line is string => line !== undefined)
    .map((line) => JSON.parse(line.slice('data: '.length)) as WorkflowEvent)
    .filter((event) => event.type !== 'token');
}

describe.skipIf(!binary)('two replicas through PgBouncer in transaction mode', () => {
  beforeAll(async () => {
    provider = await startFakeProviderServer();
    bouncer = await startPgbouncer({
      binary: binary as string,
      serverUrl: inject('testDatabaseAdminUrl'),
      poolSize: SERVER_CONNECTIONS,
    });
    // Empty: the replicas migrate and bootstrap it through PgBouncer.
    database = await createTestDatabase({ migrated: false });
    for (const name of ['a', 'b']) {
      dataDirs.push(await mkdtemp(path.join(os.tmpdir(), `waymark-e2e-pgbouncer-${name}-`)));
    }
    const env = (dataDir: string) => ({
      ...replicaEnv(provider, bouncer?.urlFor(database?.url ?? '') ?? '', dataDir),
      DATABASE_LISTEN_URL: database?.url ?? '',
      WORKFLOW_RETENTION_DAYS: '1',
      RETENTION_SWEEP_INTERVAL_MS: '1000',
    });
    const ports = await freePorts(2);
    // Spawned at once (their ports given): both race to migrate and bootstrap.
    const started = await Promise.all(
      ports.map((port, i) => processes.start({ port, env: env(dataDirs[i] as string) })),
    );
    [a, b] = started as [WaymarkProcess, WaymarkProcess];
    await Promise.all([a.waitUntilReady(60_000), b.waitUntilReady(60_000)]);
    const printed = [a, b].flatMap((replica) => printedBootstrapKeys(replica.stdout()));
    expect(printed).toHaveLength(1);
    key = printed[0] as string;
  });

  afterAll(async () => {
    await processes.killAll();
    await provider?.close();
    // Before the drop, which would otherwise wait for PgBouncer's idle server connections.
    await bouncer?.stop();
    await database?.drop();
    await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it('both replicas start at once through it: the migrations applied once, one tenant, one printed key', async () => {
    const migrations = await readMigrations();
    const applied = await direct<{ id: number }>('SELECT id FROM waymark_migrations ORDER BY id');
    expect(applied.map((row) => row.id)).toEqual(migrations.map((migration) => migration.id));
    expect(await direct('SELECT name FROM tenants')).toEqual([{ name: 'operator' }]);
    for (const replica of [a, b]) {
      expect((await call(replica, '/v1/me')).status).toBe(200);
    }
  });

  it('a workflow created on A is followed on B to its end, and one created as a stream streams its run', async () => {
    provider.enqueue(answer('Paris.'));
    const id = await create(a, { input: 'Capital of France?', mode: 'simple' });
    const stream = openStream(`${b.url}/v1/workflows/${id}/events`, { key });
    try {
      await within(stream.ended, 30_000, 'the run on A ending on B’s stream');
    } finally {
      stream.close();
    }
    expect(stream.events.map((event) => event.seq)).toEqual(
      stream.events.map((_event, index) => index + 1),
    );
    expect(stream.events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'completed' });

    provider.enqueue(answer('Rome.'));
    const streamed = await post(
      b,
      '/v1/workflows',
      { input: 'Capital of Italy?', mode: 'simple' },
      { accept: 'text/event-stream' },
    );
    expect(streamed.status).toBe(200);
    const events = sseEvents(await streamed.text());
    expect(events.map((event) => event.seq)).toEqual(events.map((_event, index) => index + 1));
    expect(events.find((event) => event.type === 'answer')?.detail).toMatchObject({
      text: 'Rome.',
    });
    expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'completed' });
  });

  it('a session’s second workflow, on the other replica, sees the first one’s question and answer', async () => {
    const session = await post(a, '/v1/sessions', { title: 'through the pooler' });
    expect(session.status).toBe(201);
    const sessionId = ((await session.json()) as { id: string }).id;
    provider.enqueue(answer('Blue whales.'));
    const first = await create(a, { input: 'Largest animal?', sessionId, mode: 'simple' });
    expect(await until(a, first, ['completed', 'failed'])).toMatchObject({ status: 'completed' });
    provider.enqueue(answer('About 30 metres.'));
    const before = provider.requests.length;
    const second = await create(b, { input: 'How long are they?', sessionId, mode: 'simple' });
    expect(await until(b, second, ['completed', 'failed'])).toMatchObject({ status: 'completed' });
    expect(JSON.stringify(provider.requests[before]?.body.messages)).toContain('Blue whales.');

    const read = await call(b, `/v1/sessions/${sessionId}`);
    const messages = ((await read.json()) as { messages: { role: string; content: string }[] })
      .messages;
    expect(messages.map((message) => [message.role, message.content])).toEqual([
      ['user', 'Largest animal?'],
      ['assistant', 'Blue whales.'],
      ['user', 'How long are they?'],
      ['assistant', 'About 30 metres.'],
    ]);
  });

  it('ask_user pauses the workflow on A; the answer posted on B resumes it to its end', async () => {
    provider.enqueue(
      callsTo({
        id: 'call_size',
        name: 'ask_user',
        arguments: { question: 'Small or large?', question_type: 'free_text' },
      }),
      answer('A large one it is.'),
    );
    const id = await create(a, { input: 'Order a coffee', mode: 'simple' });
    const paused = await until(a, id, ['awaiting_input', 'failed', 'completed']);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
    const before = provider.requests.length;
    const answered = await post(b, `/v1/workflows/${id}/answer`, {
      answer: 'large',
      version: paused.version,
    });
    expect(answered.status, await answered.clone().text()).toBe(202);
    expect(await until(b, id, ['completed', 'failed'])).toMatchObject({ status: 'completed' });
    expect(toolResultsOf(provider.requests[before])).toEqual([
      { callId: 'call_size', content: 'The user answered: large' },
    ]);
  });

  it('a pipeline pauses at its checkpoint; of two continues at once on A and B one wins, the other gets 409, and the run ends', async () => {
    provider.enqueue(
      planReply(stage('a'), stage('b', { checkpoint: true }), stage('c')),
      answer('Result of a.'),
      answer('Result of b.'),
    );
    const id = await create(a, { input: 'Research this in stages', mode: 'complex' });
    const paused = await until(a, id, ['awaiting_input', 'failed', 'completed']);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });
    provider.enqueue(answer('Result of c.'), answer('All stages done.'));
    const continues = await Promise.all(
      [a, b].map((replica) =>
        post(replica, `/v1/workflows/${id}/continue`, { version: paused.version }),
      ),
    );
    expect(continues.map((response) => response.status).sort()).toEqual([202, 409]);
    expect(await until(b, id, ['completed', 'failed'])).toMatchObject({ status: 'completed' });
    const pipeline = await call(a, `/v1/workflows/${id}/pipeline`);
    expect(pipeline.status).toBe(200);
    const stages = ((await pipeline.json()) as { stages: { id: string; status: string }[] }).stages;
    expect(stages.map((row) => [row.id, row.status])).toEqual([
      ['a', 'completed'],
      ['b', 'completed'],
      ['c', 'completed'],
    ]);
  });

  it('one Idempotency-Key sent to both replicas at once makes one workflow; another body with it is 409', async () => {
    provider.enqueue(answer('Once.'));
    const body = { input: 'Only once, please', mode: 'simple' };
    const headers = { 'idempotency-key': 'pgbouncer-once' };
    const responses = await Promise.all(
      [a, b].map((replica) => post(replica, '/v1/workflows', body, headers)),
    );
    expect(responses.map((response) => response.status).sort()).toEqual([200, 202]);
    const ids = await Promise.all(
      responses.map(async (response) => ((await response.json()) as { id: string }).id),
    );
    expect(ids[0]).toBe(ids[1]);
    expect(await until(a, ids[0] as string, ['completed', 'failed'])).toMatchObject({
      status: 'completed',
    });
    const rows = await direct<{ count: string }>(
      "SELECT count(*) AS count FROM workflows WHERE input = 'Only once, please'",
    );
    expect(rows).toEqual([{ count: '1' }]);
    const reused = await post(b, '/v1/workflows', { ...body, input: 'Something else' }, headers);
    expect(reused.status).toBe(409);
    expect(((await reused.json()) as { code: string }).code).toBe('idempotency_key_reused');
  });

  it('a stream token from A opens the events on B without an API key', async () => {
    const hanging = hangingReply(['Almost ', 'there.']);
    provider.enqueue(hanging.reply);
    const id = await create(a, { input: 'Follow me in a browser', mode: 'simple' });
    const issued = await post(a, `/v1/workflows/${id}/stream-token`);
    expect(issued.status).toBe(200);
    const { url } = (await issued.json()) as { url: string };
    const stream = openStream(`${b.url}${url}`);
    try {
      await within(hanging.started, 20_000, 'the reply streaming');
      hanging.release();
      await within(stream.ended, 30_000, 'the stream ending');
    } finally {
      hanging.release();
      stream.close();
    }
    expect(stream.events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'completed' });
  });

  it('a cancel on B stops the run on A mid-reply', async () => {
    const hanging = hangingReply(['Never ', 'finished.']);
    provider.enqueue(hanging.reply);
    const id = await create(a, { input: 'A long one', mode: 'simple' });
    try {
      await within(hanging.started, 20_000, 'the reply streaming');
      const cancelled = await post(b, `/v1/workflows/${id}/cancel`);
      expect(cancelled.status, await cancelled.clone().text()).toBe(202);
      expect(await until(a, id, ['cancelled', 'completed', 'failed'])).toMatchObject({
        status: 'cancelled',
      });
    } finally {
      hanging.release();
    }
  });

  it('the retention sweep deletes a workflow that finished past the retention age', async () => {
    provider.enqueue(answer('Old news.'));
    const id = await create(b, { input: 'Soon to be swept', mode: 'simple' });
    await until(b, id, ['completed', 'failed']);
    await direct("UPDATE workflows SET finished_at = now() - interval '2 days' WHERE id = $1", [
      id,
    ]);
    await waitFor(
      async () => ((await call(a, `/v1/workflows/${id}`)).status === 404 ? true : undefined),
      'the sweep to delete the workflow',
      30_000,
    );
  });

  it('many workflows at once on both replicas all complete, over the two shared server connections', async () => {
    const ids = await Promise.all(
      Array.from({ length: 16 }, (_unused, i) => {
        provider.enqueue(answer(`Answer ${i}.`));
        return create(i % 2 === 0 ? a : b, { input: `Question ${i}?`, mode: 'simple' });
      }),
    );
    for (const id of ids) {
      expect(await until(a, id, ['completed', 'failed'])).toMatchObject({ status: 'completed' });
    }
    const pools = (await bouncer?.show('POOLS')) ?? [];
    const pool = pools.find((row) => row.database === database?.name);
    expect(pool).toBeDefined();
    // Each replica holds several client connections; PgBouncer served them all with two.
    expect(Number(pool?.cl_active) + Number(pool?.cl_waiting)).toBeGreaterThan(SERVER_CONNECTIONS);
    const servers = ((await bouncer?.show('SERVERS')) ?? []).filter(
      (row) => row.database === database?.name,
    );
    expect(servers.length).toBeLessThanOrEqual(SERVER_CONNECTIONS);
  });

  it('both replicas stop cleanly on SIGTERM, and neither logged an error', async () => {
    const exits = await Promise.all([a, b].map((replica) => replica.stop('SIGTERM', 60_000)));
    for (const exit of exits) expect(exit).toMatchObject({ code: 0, signal: null });
    for (const replica of [a, b]) {
      const errors = replica
        .stdout()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { level: number; msg: string })
        .filter((line) => line.level >= 50);
      expect(errors).toEqual([]);
    }
  });
});
