import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect } from 'vitest';
import { claimExpiredLeases } from '../../src/store/workflow-leases.js';
import { workflowsRepository } from '../../src/store/workflows.js';
import { bearer, startTestApp, type TestApp } from './app.js';

/** Helpers for tests that drive workflows through the HTTP API of a test app. */

/** An offline catalogue: `scripted` answers at once, `slow` pauses between tokens. */
export function scriptedCatalogue(slowTokenDelayMs = 200): string {
  const model = (name: string, extra: Record<string, unknown> = {}) => ({
    name,
    provider: 'offline',
    modelId: name,
    contextWindow: 32_000,
    maxOutputTokens: 1_000,
    ...extra,
  });
  return JSON.stringify({
    providers: [{ name: 'offline', kind: 'scripted' }],
    models: [model('scripted'), model('slow', { scriptedTokenDelayMs: slowTokenDelayMs })],
    defaultModel: 'scripted',
  });
}

export interface TestTenant {
  id: string;
  key: string;
}

/** The operator's key, from the bootstrap of an empty database. */
export async function bootstrapOperator(testApp: TestApp): Promise<string> {
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  return created.adminKey.secret;
}

export async function createTenant(
  testApp: TestApp,
  operatorKey: string,
  payload: Record<string, unknown>,
): Promise<TestTenant> {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/tenants',
    headers: bearer(operatorKey),
    payload,
  });
  expect(response.statusCode, response.body).toBe(201);
  const body = response.json() as { tenant: { id: string }; adminKey: { key: string } };
  return { id: body.tenant.id, key: body.adminKey.key };
}

/**
 * The test file's app on the scripted catalogue, with an operator: started
 * before the file's tests and closed after them. `app()` is the running
 * app; `newTenant` creates a tenant (with `settings`, such as budgets)
 * through the operator's key, `operatorKey()`.
 */
export function useScriptedApp() {
  let testApp: TestApp | undefined;
  let operatorKey: string | undefined;
  beforeAll(async () => {
    testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue(), RATE_LIMIT_MAX: '100000' });
    operatorKey = await bootstrapOperator(testApp);
  });
  afterAll(async () => testApp?.close());

  function app(): TestApp {
    if (!testApp) throw new Error('the scripted app starts in beforeAll');
    return testApp;
  }
  return {
    app,
    /** The operator tenant's admin key, from the bootstrap. */
    operatorKey(): string {
      if (!operatorKey) throw new Error('the scripted app starts in beforeAll');
      return operatorKey;
    },
    newTenant(name: string, settings: Record<string, unknown> = {}): Promise<TestTenant> {
      if (!operatorKey) throw new Error('the scripted app starts in beforeAll');
      return createTenant(app(), operatorKey, { name, ...settings });
    },
  };
}

export function postWorkflow(
  testApp: TestApp,
  key: string,
  payload: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  return testApp.app.inject({
    method: 'POST',
    url: '/v1/workflows',
    headers: { ...bearer(key), ...headers },
    payload,
  });
}

/** Creates a workflow and returns its id (202 expected). */
export async function startWorkflow(
  testApp: TestApp,
  key: string,
  payload: Record<string, unknown>,
): Promise<string> {
  const response = await postWorkflow(testApp, key, payload);
  expect(response.statusCode, response.body).toBe(202);
  return (response.json() as { id: string }).id;
}

export async function getWorkflow(testApp: TestApp, key: string, id: string) {
  const response = await testApp.app.inject({
    method: 'GET',
    url: `/v1/workflows/${id}`,
    headers: bearer(key),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json() as Record<string, unknown> & { status: string; version: number };
}

export function cancelWorkflow(testApp: TestApp, key: string, id: string) {
  return testApp.app.inject({
    method: 'POST',
    url: `/v1/workflows/${id}/cancel`,
    headers: bearer(key),
  });
}

/**
 * Answers a paused workflow's question (`POST .../answer`, at the version
 * the caller saw) and waits until the workflow has completed or failed.
 */
export async function answerToEnd(
  testApp: TestApp,
  key: string,
  body: { id: string; answer: string; version: number },
) {
  const { id, ...payload } = body;
  const answered = await testApp.app.inject({
    method: 'POST',
    url: `/v1/workflows/${id}/answer`,
    headers: bearer(key),
    payload,
  });
  expect(answered.statusCode, answered.body).toBe(202);
  return waitForStatus(testApp, key, id, ['completed', 'failed']);
}

/** Polls until `check` returns a value other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(
  check: () => Promise<T | undefined> | T | undefined,
  what: string,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

export async function waitForStatus(
  testApp: TestApp,
  key: string,
  id: string,
  statuses: string[],
  timeoutMs = 10_000,
) {
  return waitFor(
    async () => {
      const workflow = await getWorkflow(testApp, key, id);
      return statuses.includes(workflow.status) ? workflow : undefined;
    },
    `workflow ${id} to be ${statuses.join(' or ')}`,
    timeoutMs,
  );
}

export interface StoredEvent {
  seq: number;
  type: string;
  step: string | null;
  status: string;
  detail: Record<string, unknown>;
  elapsed_ms: number | null;
}

/** The persisted events of a workflow, in seq order, straight from the store. */
export async function storedEvents(testApp: TestApp, workflowId: string): Promise<StoredEvent[]> {
  const { rows } = await testApp.services.database.pool.query<StoredEvent>(
    'SELECT seq, type, step, status, detail, elapsed_ms FROM workflow_events WHERE workflow_id = $1 ORDER BY seq',
    [workflowId],
  );
  return rows;
}

/** As at shutdown: the workflow's run on this app stops and hands its lease over; resolves once it has stopped. */
export async function handOver(testApp: TestApp, id: string): Promise<void> {
  testApp.services.executions.stop(id, 'shutdown');
  await runStopped(testApp, id);
}

/** Resolves once the workflow has no run on this app. */
export async function runStopped(testApp: TestApp, id: string): Promise<void> {
  await waitFor(
    () => (testApp.services.executions.isRunning(id) ? undefined : true),
    `the run of ${id} to stop`,
  );
}

/**
 * The workflow's run stalls past its lease (a frozen process): the lease
 * expires now, still held by its run, and the next sweep takes it.
 */
export async function expireLease(testApp: TestApp, id: string): Promise<void> {
  await testApp.services.database.pool.query(
    `UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
    [id],
  );
}

/**
 * A sweep by `owner`, a replica that runs nothing (the claim alone), takes
 * the workflow over once its lease has expired. A sweep skips a row that a
 * write of the stalled run (an event it appends) holds locked at that
 * moment, so it is repeated, as the next sweep would, until it takes it.
 */
export async function claimAs(testApp: TestApp, id: string, owner: string): Promise<void> {
  await waitFor(async () => {
    const claimed = await claimExpiredLeases(testApp.services.database.db, {
      owner,
      leaseMs: 60_000,
      unclaimedGraceMs: 60_000,
      limit: 10,
    });
    return claimed.some((row) => row.id === id) || undefined;
  }, `a claim of ${id} by ${owner}`);
}

/** Resolves once the workflow has stored an event of `type` at `step` (an `llm_call` at `a/turn-1`). */
export async function eventStored(
  testApp: TestApp,
  id: string,
  event: { type: string; step?: string },
): Promise<void> {
  await waitFor(
    async () =>
      (await storedEvents(testApp, id)).some(
        (stored) =>
          stored.type === event.type && (event.step === undefined || stored.step === event.step),
      ) || undefined,
    `a ${event.type} event${event.step ? ` at ${event.step}` : ''} of ${id}`,
  );
}

/** One sweep by this app, which must take the workflow over; resolves with the workflow once it has ended. */
export async function takeOverToEnd(
  testApp: TestApp,
  key: string,
  id: string,
): Promise<Record<string, unknown>> {
  const taken = await testApp.services.reclaimer.sweepOnce();
  expect(taken.map((workflow) => workflow.id)).toContain(id);
  return waitForStatus(testApp, key, id, ['completed', 'failed']);
}

/**
 * The `llm_call` steps, `tool_call` ids and `stage` attempts whose last
 * event is `started`: what a client reading the events would show as
 * still in progress.
 */
export function openWork(events: StoredEvent[]): string[] {
  const last = new Map<string, string>();
  for (const event of events) {
    const item =
      event.type === 'tool_call'
        ? event.detail.callId
        : event.type === 'stage'
          ? event.detail.attempt
          : event.type === 'llm_call'
            ? ''
            : undefined;
    if (item === undefined) continue;
    last.set(`${event.type} ${event.step} ${String(item)}`.trimEnd(), event.status);
  }
  return [...last].filter(([, status]) => status === 'started').map(([work]) => work);
}

/** The lease owner of an orphaned workflow's run, which died holding the lease. */
export const DEAD_RUN = 'dead-replica';

/**
 * A running workflow whose runner died holding its lease, as a sweep finds
 * it: written straight to the store, nothing of it run here.
 */
export async function orphanedWorkflow(
  testApp: TestApp,
  tenantId: string,
  input = 'What is 6 * 7?',
): Promise<string> {
  const id = randomUUID();
  await workflowsRepository(testApp.services.database.db).insert({
    id,
    tenantId,
    sessionId: null,
    sessionSeq: null,
    mode: 'simple',
    model: 'gpt',
    input,
    tools: [],
    metadata: {},
    idempotencyKey: null,
    requestHash: null,
  });
  await testApp.services.database.pool.query(
    `UPDATE workflows SET status = 'running', kind = 'simple', started_at = now(),
       lease_owner = $2, lease_expires_at = now() - interval '1 second'
     WHERE id = $1`,
    [id, DEAD_RUN],
  );
  return id;
}

export async function countWorkflows(testApp: TestApp, tenantId: string): Promise<number> {
  const { rows } = await testApp.services.database.pool.query<{ count: string }>(
    'SELECT count(*) AS count FROM workflows WHERE tenant_id = $1',
    [tenantId],
  );
  return Number(rows[0]?.count ?? 0);
}

/** Creates a session of the key's tenant and returns its id. */
export async function createSession(
  testApp: TestApp,
  key: string,
  payload: Record<string, unknown> = {},
): Promise<string> {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/sessions',
    headers: bearer(key),
    payload,
  });
  expect(response.statusCode, response.body).toBe(201);
  return (response.json() as { id: string }).id;
}
