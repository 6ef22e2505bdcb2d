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
import { replicaEnv as clusterReplicaEnv, hangingReply } from '../support/replica-cluster.js';
import { toolResultsOf } from '../support/tool-loop-harness.js';
import { waitFor } from '../support/workflows.js';

/**
 * Two real server processes on one database. The one running a workflow
 * is killed with SIGKILL in the middle of a model turn (of the tool loop,
 * or of a pipeline stage); the other takes the workflow over once its lease
 * expires and finishes it from the last persisted turn or stage. An SSE
 * client that moves to the survivor with Last-Event-ID sees every event
 * exactly once. Stopped with SIGTERM instead, the replica hands the lease
 * over and the other one resumes at once. A workflow cut at the same point
 * on replica after replica is failed once WORKFLOW_MAX_TAKEOVERS is passed.
 */

const processes = waymarkProcesses();
/** One fresh database per test: each starts from an empty tenancy with a printed key. */
const databases: TestDatabase[] = [];
let provider: FakeProviderServer;
const dataDirs: string[] = [];

beforeAll(async () => {
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
  await Promise.all(databases.map((database) => database.drop()));
  await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** Replica `index`'s settings: short leases and sweeps, so takeovers happen in about two seconds. */
function replicaEnv(database: TestDatabase, index: number): Record<string, string> {
  return clusterReplicaEnv(provider, database.url, dataDirs[index] as string);
}

/** Requests the fake received for one workflow's question. */
function requestsFor(question: string): RecordedRequest[] {
  return provider.requests.filter((request) =>
    JSON.stringify(request.body.messages).includes(question),
  );
}

/** Two replicas on the test database: A (which will run the workflow and be killed) and B. */
async function startReplicas(
  overrides: Record<string, string> = {},
): Promise<{ a: WaymarkProcess; b: WaymarkProcess; key: string }> {
  const database = await createTestDatabase();
  databases.push(database);
  const a = await processes.start({ env: { ...replicaEnv(database, 0), ...overrides } });
  await a.waitUntilReady(60_000);
  // Ready comes after the banner was written; its bytes may still be in the pipe.
  await a.waitForStdout(/^\s*wmk_\S+\s*$/m, 10_000);
  const [key] = printedBootstrapKeys(a.stdout());
  if (!key) throw new Error('no bootstrap key was printed');
  const b = await processes.start({ env: { ...replicaEnv(database, 1), ...overrides } });
  await b.waitUntilReady(60_000);
  return { a, b, key };
}

async function createWorkflow(
  replica: WaymarkProcess,
  key: string,
  body: Record<string, unknown>,
): Promise<string> {
  const created = await fetch(`${replica.url}/v1/workflows`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(created.status).toBe(202);
  return ((await created.json()) as { id: string }).id;
}

/**
 * Kills A once `inFlight` says the turn to cut is under way, then follows
 * the workflow on B from the last event A's stream delivered; returns
 * every event the client saw, over both connections.
 */
/**
 * A simple-path workflow on `replica` whose turn 1 calls the calculator and
 * whose turn 2 hangs after its first chunk until released (the turn a
 * replica is stopped in); the turn after that answers "It is 42.".
 */
async function startHangingToolLoop(
  replica: WaymarkProcess,
  key: string,
  turn: { callId: string; expression: string; question: string },
): Promise<{ hanging: ReturnType<typeof hangingReply>; question: string; id: string }> {
  const hanging = hangingReply(['The answer ', 'is cut off.']);
  provider.enqueue(
    {
      kind: 'reply',
      toolCalls: [
        { id: turn.callId, name: 'calculator', arguments: { expression: turn.expression } },
      ],
    },
    hanging.reply,
    { kind: 'reply', chunks: ['It is ', '42.'] },
  );
  const id = await createWorkflow(replica, key, { input: turn.question, mode: 'simple' });
  return { hanging, question: turn.question, id };
}

async function killAndFollow(options: {
  a: WaymarkProcess;
  b: WaymarkProcess;
  key: string;
  id: string;
  hanging: ReturnType<typeof hangingReply>;
  inFlight: (events: WorkflowEvent[]) => boolean;
  /** SIGKILL (a crash) unless given. */
  signal?: NodeJS.Signals;
}): Promise<{ events: WorkflowEvent[]; afterKill: WorkflowEvent[] }> {
  const { a, b, key, id, hanging } = options;
  const first = openStream(`${a.url}/v1/workflows/${id}/events`, { key });
  await within(hanging.started, 20_000, 'the hanging turn streaming on A');
  await eventually(() => options.inFlight(first.events), 10_000, 'the cut turn under way on A');
  a.signal(options.signal ?? 'SIGKILL');
  await a.waitForExit(30_000);
  hanging.release();
  first.close();
  const second = openStream(`${b.url}/v1/workflows/${id}/events`, {
    key,
    lastEventId: first.lastEventId(),
  });
  await within(second.ended, 30_000, 'the workflow ending on B');
  return { events: [...first.events, ...second.events], afterKill: second.events };
}

async function workflowOn(replica: WaymarkProcess, key: string, id: string) {
  const response = await fetch(`${replica.url}/v1/workflows/${id}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return (await response.json()) as Record<string, unknown>;
}

function expectEveryEventOnce(events: WorkflowEvent[]): void {
  expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
  expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'completed' });
}

describe('a replica that stops while it runs a workflow', () => {
  it('SIGKILL in the middle of a tool loop: the other replica finishes it; turns completed before the crash are not run again; the SSE client sees every event once', async () => {
    const { a, b, key } = await startReplicas();
    const { hanging, question, id } = await startHangingToolLoop(a, key, {
      callId: 'call_mul',
      expression: '6 * 7',
      question: `What is six times seven? (${Date.now()})`,
    });
    const { events, afterKill } = await killAndFollow({
      a,
      b,
      key,
      id,
      hanging,
      inFlight: (seen) =>
        seen.some((event) => event.type === 'llm_call' && event.step === 'turn-2'),
    });

    expectEveryEventOnce(events);
    expect(afterKill.some((event) => event.type === 'resumed')).toBe(true);
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
    expect(await workflowOn(b, key, id)).toMatchObject({
      status: 'completed',
      result: { answer: 'It is 42.' },
    });
  });

  it('SIGKILL in the middle of a pipeline stage: the other replica finishes it; stages completed before the crash are not run again; the SSE client sees every event once', async () => {
    const { a, b, key } = await startReplicas();
    const hanging = hangingReply(['The answer ', 'is cut off.']);
    const stage = (id: string) => ({ id, title: `Stage ${id}`, goal: `Work out ${id}` });
    provider.enqueue(
      { kind: 'reply', text: JSON.stringify({ stages: [stage('a'), stage('b'), stage('c')] }) },
      { kind: 'reply', text: 'Result of a.' },
      hanging.reply,
      { kind: 'reply', text: 'Result of b.' },
      { kind: 'reply', text: 'Result of c.' },
      { kind: 'reply', text: 'The final answer.' },
    );
    const question = `Compare a, b and c (${Date.now()})`;
    const id = await createWorkflow(a, key, { input: question, mode: 'complex' });
    const { events, afterKill } = await killAndFollow({
      a,
      b,
      key,
      id,
      hanging,
      inFlight: (seen) =>
        seen.some(
          (event) => event.type === 'stage' && event.step === 'b' && event.status === 'started',
        ),
    });

    expectEveryEventOnce(events);
    expect(afterKill.some((event) => event.type === 'resumed')).toBe(true);
    expect(
      events
        .filter((event) => event.type === 'stage' && event.status === 'completed')
        .map((event) => event.step),
    ).toEqual(['a', 'b', 'c']);
    // Planner and stage a once, stage b twice (cut off on A, again on B), c and synthesis once.
    const requests = requestsFor(question);
    expect(requests).toHaveLength(6);
    const pipeline = (await (
      await fetch(`${b.url}/v1/workflows/${id}/pipeline`, {
        headers: { authorization: `Bearer ${key}` },
      })
    ).json()) as { stages: { id: string; attempts: { status: string; reason: string }[] }[] };
    expect(
      pipeline.stages.map((s) =>
        s.attempts.map((attempt) => `${attempt.status}:${attempt.reason}`),
      ),
    ).toEqual([['completed:first'], ['failed:first', 'completed:resumed'], ['completed:first']]);
    expect(await workflowOn(b, key, id)).toMatchObject({
      status: 'completed',
      result: { answer: 'The final answer.' },
    });
  });

  it('SIGTERM in the middle of a tool loop: the replica hands its lease over and the other one resumes at once, long before the lease would expire', async () => {
    // A lease of a minute: only the hand-over explains a resume within seconds.
    const { a, b, key } = await startReplicas({
      WORKFLOW_LEASE_MS: '60000',
      WORKFLOW_LEASE_RENEW_MS: '20000',
      SHUTDOWN_GRACE_MS: '200',
    });
    const { hanging, id } = await startHangingToolLoop(a, key, {
      callId: 'call_add',
      expression: '40 + 2',
      question: `What is forty plus two? (${Date.now()})`,
    });
    const stopped = performance.now();
    const { events, afterKill } = await killAndFollow({
      a,
      b,
      key,
      id,
      hanging,
      inFlight: (seen) =>
        seen.some((event) => event.type === 'llm_call' && event.step === 'turn-2'),
      signal: 'SIGTERM',
    });
    expect(performance.now() - stopped).toBeLessThan(30_000);
    expectEveryEventOnce(events);
    expect(afterKill.some((event) => event.type === 'resumed')).toBe(true);
    expect(events.some((event) => event.type === 'workflow_end' && event.status === 'failed')).toBe(
      false,
    );
    expect(await workflowOn(b, key, id)).toMatchObject({
      status: 'completed',
      result: { answer: 'It is 42.' },
    });
  });
});

describe('a workflow whose runs are cut at the same point again and again', () => {
  it('SIGKILL in the same turn on two replicas in a row, with WORKFLOW_MAX_TAKEOVERS 1: the third fails it with too_many_takeovers and calls no model', async () => {
    const limit = { WORKFLOW_MAX_TAKEOVERS: '1' };
    const { a, b, key } = await startReplicas(limit);
    const onA = hangingReply(['The answer ', 'is cut off.']);
    const onB = hangingReply(['The answer ', 'is cut off.']);
    provider.enqueue(onA.reply, onB.reply);
    const question = `Which turn never ends? (${Date.now()})`;
    const id = await createWorkflow(a, key, { input: question, mode: 'simple' });
    await within(onA.started, 20_000, 'the turn streaming on A');
    a.signal('SIGKILL');
    await a.waitForExit(30_000);
    onA.release();
    // B takes it over once A's lease expires: one takeover without progress, within the limit.
    await within(onB.started, 30_000, 'the same turn streaming on B');
    b.signal('SIGKILL');
    await b.waitForExit(30_000);
    onB.release();
    const database = databases.at(-1) as TestDatabase;
    const c = await processes.start({ env: { ...replicaEnv(database, 0), ...limit } });
    await c.waitUntilReady(60_000);

    const failed = await waitFor(
      async () => {
        const workflow = await workflowOn(c, key, id);
        // Queued still while its first turn hangs: its start is written with that turn.
        return workflow.status === 'queued' || workflow.status === 'running' ? undefined : workflow;
      },
      'the workflow ending on C',
      30_000,
    );
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'too_many_takeovers' } });
    expect(requestsFor(question)).toHaveLength(2);
  });
});
