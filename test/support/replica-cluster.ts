import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { FakeProviderServer, FakeResponse } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { printedBootstrapKeys, type WaymarkProcess, type WaymarkProcesses } from './process.js';

/** Real replicas (processes) on one test database, for the end-to-end tests of shutdowns and takeovers. */

export function replicaEnv(
  provider: FakeProviderServer,
  databaseUrl: string,
  dataDir: string,
): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    WAYMARK_DATA_DIR: dataDir,
    WAYMARK_MODELS: JSON.stringify({
      providers: [{ name: 'oai', kind: 'openai', baseUrl: provider.openaiBaseUrl }],
      models: [
        {
          name: 'gpt',
          provider: 'oai',
          modelId: 'gpt-id',
          contextWindow: 32_000,
          maxOutputTokens: 256,
        },
      ],
      defaultModel: 'gpt',
    }),
    LLM_MAX_RETRIES_PER_MODEL: '0',
    WORKFLOW_LEASE_MS: '2000',
    WORKFLOW_LEASE_RENEW_MS: '500',
    LEASE_RECLAIM_INTERVAL_MS: '250',
    SHUTDOWN_GRACE_MS: '2000',
  };
}

export interface Cluster {
  database: TestDatabase;
  dataDirs: string[];
  a: WaymarkProcess;
  b: WaymarkProcess;
  key: string;
  cleanup(): Promise<void>;
}

export async function startTwoReplicas(
  processes: WaymarkProcesses,
  provider: FakeProviderServer,
  overrides: Record<string, string> = {},
): Promise<Cluster> {
  const database = await createTestDatabase();
  const dataDirs = [
    await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-a-')),
    await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-b-')),
  ];
  const a = await processes.start({
    env: { ...replicaEnv(provider, database.url, dataDirs[0] as string), ...overrides },
  });
  await a.waitUntilReady(60_000);
  await a.waitForStdout(/^\s*wmk_\S+\s*$/m, 10_000);
  const [key] = printedBootstrapKeys(a.stdout());
  if (!key) throw new Error('no bootstrap key was printed');
  const b = await processes.start({
    env: { ...replicaEnv(provider, database.url, dataDirs[1] as string), ...overrides },
  });
  await b.waitUntilReady(60_000);
  return {
    database,
    dataDirs,
    a,
    b,
    key,
    async cleanup() {
      await processes.killAll();
      await database.drop();
      await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
    },
  };
}

/** A reply that hangs after its first chunk until released. */
export function hangingReply(chunks: string[]): {
  reply: FakeResponse;
  started: Promise<void>;
  release: () => void;
} {
  let release: () => void = () => undefined;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let markStarted: () => void = () => undefined;
  const started = new Promise<void>((resolve) => {
    markStarted = resolve;
  });
  return {
    reply: {
      kind: 'reply',
      chunks,
      betweenChunks: async () => {
        markStarted();
        await held;
      },
    },
    started,
    release,
  };
}

export async function createWorkflow(
  replica: WaymarkProcess,
  key: string,
  body: Record<string, unknown>,
): Promise<string> {
  const created = await fetch(`${replica.url}/v1/workflows`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (created.status !== 202) throw new Error(`create answered ${created.status}`);
  return ((await created.json()) as { id: string }).id;
}

export async function workflowOn(
  replica: WaymarkProcess,
  key: string,
  id: string,
): Promise<Record<string, unknown>> {
  const response = await fetch(`${replica.url}/v1/workflows/${id}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return (await response.json()) as Record<string, unknown>;
}

export interface Row {
  seq: number;
  type: string;
  step: string | null;
  status: string;
  detail: Record<string, unknown>;
}

export async function storedEventsOf(databaseUrl: string, workflowId: string): Promise<Row[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<Row>(
      'SELECT seq, type, step, status, detail FROM workflow_events WHERE workflow_id = $1 ORDER BY seq',
      [workflowId],
    );
    return rows;
  } finally {
    await client.end();
  }
}
