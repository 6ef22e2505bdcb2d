import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer, RecordedRequest } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { eventually, openStream, within } from '../support/event-streams.js';
import { printedBootstrapKeys, type WaymarkProcess, waymarkProcesses } from '../support/process.js';
import { toolResultsOf } from '../support/tool-loop-harness.js';

/**
 * Two real server processes on one database. The one running a workflow
 * is killed with SIGKILL in the middle of a model turn; the other takes the
 * workflow over once its lease expires and finishes it from the last
 * persisted turn. An SSE client that moves to the survivor with
 * Last-Event-ID sees every event exactly once.
 */

const processes = waymarkProcesses();
let database: TestDatabase | undefined;
let provider: FakeProviderServer;
const dataDirs: string[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  provider = await startFakeProviderServer();
  for (let i = 0; i < 2; i++) {
    dataDirs.push(await mkdtemp(path.join(os.tmpdir(), `waymark-e2e-crash-${i}-`)));
  }
});

afterEach(async () => {
  await processes.killAll();
});

afterAll(async () => {
  await processes.killAll();
  await provider?.close();
  await database?.drop();
  await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

function replicaEnv(index: number): Record<string, string> {
  if (!database) throw new Error('the test database was not created');
  return {
    DATABASE_URL: database.url,
    WAYMARK_DATA_DIR: dataDirs[index] as string,
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

/** Requests the fake received for one workflow's question. */
function requestsFor(question: string): RecordedRequest[] {
  return provider.requests.filter((request) =>
    JSON.stringify(request.body.messages).includes(question),
  );
}

describe('a replica killed in the middle of a tool loop', () => {
  it('the other replica finishes the workflow; turns completed before the crash are not run again; the SSE client sees every event once', async () => {
    const a: WaymarkProcess = await processes.start({ env: replicaEnv(0) });
    await a.waitUntilReady(60_000);
    const [key] = printedBootstrapKeys(a.stdout());
    if (!key) throw new Error('no bootstrap key was printed');
    const b: WaymarkProcess = await processes.start({ env: replicaEnv(1) });
    await b.waitUntilReady(60_000);

    // Turn 1 calls the calculator; turn 2 hangs after its first chunk until A is dead.
    let releaseTurn2: () => void = () => undefined;
    const turn2Held = new Promise<void>((resolve) => {
      releaseTurn2 = resolve;
    });
    let turn2Started: () => void = () => undefined;
    const turn2Streaming = new Promise<void>((resolve) => {
      turn2Started = resolve;
    });
    provider.enqueue(
      {
        kind: 'reply',
        toolCalls: [{ id: 'call_mul', name: 'calculator', arguments: { expression: '6 * 7' } }],
      },
      {
        kind: 'reply',
        chunks: ['The answer ', 'is cut off.'],
        betweenChunks: async () => {
          turn2Started();
          await turn2Held;
        },
      },
      { kind: 'reply', chunks: ['It is ', '42.'] },
    );
    const question = `What is six times seven? (${Date.now()})`;
    const created = await fetch(`${a.url}/v1/workflows`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: question, mode: 'simple' }),
    });
    expect(created.status).toBe(202);
    const { id } = (await created.json()) as { id: string };

    const first = openStream(`${a.url}/v1/workflows/${id}/events`, { key });
    await within(turn2Streaming, 20_000, 'turn 2 streaming on A');
    await eventually(
      () => first.events.some((event) => event.type === 'llm_call' && event.step === 'turn-2'),
      10_000,
      'turn 2 started on A',
    );
    a.signal('SIGKILL');
    await a.waitForExit(10_000);
    releaseTurn2();
    first.close();

    const second = openStream(`${b.url}/v1/workflows/${id}/events`, {
      key,
      lastEventId: first.lastEventId(),
    });
    await within(second.ended, 30_000, 'the workflow ending on B');

    const events: WorkflowEvent[] = [...first.events, ...second.events];
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
    expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'completed' });
    expect(second.events.some((event) => event.type === 'resumed')).toBe(true);
    expect(events.find((event) => event.type === 'answer')?.detail).toMatchObject({
      text: 'It is 42.',
    });

    // Turn 1 ran once; turn 2 twice (cut off on A, again on B), with turn 1's result.
    const requests = requestsFor(question);
    expect(requests).toHaveLength(3);
    expect(toolResultsOf(requests[0] as RecordedRequest)).toEqual([]);
    for (const retried of requests.slice(1)) {
      expect(toolResultsOf(retried).map((result) => result.callId)).toEqual(['call_mul']);
    }
    const workflow = (await (
      await fetch(`${b.url}/v1/workflows/${id}`, { headers: { authorization: `Bearer ${key}` } })
    ).json()) as Record<string, unknown>;
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
  });
});
