import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/store/database.js';
import { claimExpiredLeases } from '../../src/store/workflow-leases.js';
import { workflowsRepository } from '../../src/store/workflows.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { silentLog } from '../support/tracker-database.js';
import {
  bootstrapOperator,
  cancelWorkflow,
  createTenant,
  getWorkflow,
  postWorkflow,
  scriptedCatalogue,
  startWorkflow,
  storedEvents,
  type TestTenant,
  waitFor,
  waitForStatus,
} from '../support/workflows.js';

/**
 * Runs of the executor: cancel (here and from another replica),
 * concurrent transitions, shutdown drain, and the leases under them. The
 * `slow` model pauses 200 ms between tokens, so its answer takes seconds.
 */

let testApp: TestApp;
let tenant: TestTenant;

beforeAll(async () => {
  testApp = await startTestApp({
    WAYMARK_MODELS: scriptedCatalogue(200),
    RATE_LIMIT_MAX: '100000',
  });
  const operatorKey = await bootstrapOperator(testApp);
  tenant = await createTenant(testApp, operatorKey, { name: 'runs' });
});
afterAll(async () => testApp?.close());

/** Starts a slow workflow and waits until its answer is streaming. */
async function startStreaming(app: TestApp, key: string): Promise<string> {
  const response = await postWorkflow(app, key, { input: 'take your time', model: 'slow' });
  expect(response.statusCode, response.body).toBe(202);
  const id = response.json().id as string;
  let streamed = '';
  const unsubscribe = app.services.hub.subscribe(id, {
    onEvent: () => undefined,
    onTokens: (text) => {
      streamed += text;
    },
  });
  try {
    await waitFor(() => (streamed.length > 0 ? true : undefined), 'the first tokens');
  } finally {
    unsubscribe();
  }
  return id;
}

async function ledgerOutcomes(app: TestApp, workflowId: string): Promise<string[]> {
  await app.services.llm.ledger.flush();
  const { rows } = await app.services.database.pool.query<{ outcome: string }>(
    'SELECT outcome FROM llm_calls WHERE workflow_id = $1 ORDER BY attempt',
    [workflowId],
  );
  return rows.map((row) => row.outcome);
}

function expectGapFree(events: { seq: number }[]): void {
  expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
}

describe('cancel', () => {
  it('a running workflow ends cancelled within a second, its model call aborted, ended as cancelled in the log, and the text streamed so far kept', async () => {
    const id = await startStreaming(testApp, tenant.key);
    const asked = performance.now();
    const response = await cancelWorkflow(testApp, tenant.key, id);
    expect(response.statusCode, response.body).toBe(202);
    expect(response.json()).toMatchObject({ id, status: 'cancelled', result: null });

    await waitFor(
      () => (testApp.services.executions.isRunning(id) ? undefined : true),
      'the run to stop',
      1_000,
    );
    expect(performance.now() - asked).toBeLessThan(1_000);
    const cancelled = await getWorkflow(testApp, tenant.key, id);
    expect(cancelled).toMatchObject({
      status: 'cancelled',
      finishedAt: expect.any(String),
      result: { reason: 'cancelled', answer: expect.stringMatching(/\S/) },
    });
    expect(await ledgerOutcomes(testApp, id)).toEqual(['cancelled']);

    // Nothing is appended after workflow_end, even once the aborted call has unwound.
    await sleep(300);
    const events = await storedEvents(testApp, id);
    expectGapFree(events);
    expect(events.map((event) => [event.type, event.status])).toEqual([
      ['workflow_start', 'started'],
      ['classification', 'completed'],
      ['llm_call', 'started'],
      ['llm_call', 'failed'],
      ['workflow_end', 'cancelled'],
    ]);
    // The call in flight ends with the cancel, in its step, written by the cancel's transaction.
    const [started, ended] = events.filter((event) => event.type === 'llm_call');
    expect(ended).toMatchObject({
      step: started?.step,
      detail: { error: { code: 'cancelled', message: expect.stringMatching(/cancelled/) } },
    });
  });

  it('a finished workflow answers 409 workflow_finished', async () => {
    const id = await startWorkflow(testApp, tenant.key, { input: 'quick' });
    await waitForStatus(testApp, tenant.key, id, ['completed']);
    const response = await cancelWorkflow(testApp, tenant.key, id);
    expect(response.statusCode).toBe(409);
    expect(response.json().code).toBe('workflow_finished');
    expect((await getWorkflow(testApp, tenant.key, id)).status).toBe('completed');
  });

  it('two concurrent cancels: one wins with 202, the other gets 409', async () => {
    const id = await startStreaming(testApp, tenant.key);
    const responses = await Promise.all([
      cancelWorkflow(testApp, tenant.key, id),
      cancelWorkflow(testApp, tenant.key, id),
    ]);
    expect(responses.map((response) => response.statusCode).sort()).toEqual([202, 409]);
    const loser = responses.find((response) => response.statusCode === 409);
    expect(loser?.json().code).toBe('workflow_finished');
    const events = await storedEvents(testApp, id);
    expect(events.filter((event) => event.type === 'workflow_end')).toHaveLength(1);
  });

  it('a workflow cancelled right after its creation never produces an answer', async () => {
    const id = await startWorkflow(testApp, tenant.key, { input: 'never mind', model: 'slow' });
    expect((await cancelWorkflow(testApp, tenant.key, id)).statusCode).toBe(202);
    await waitFor(
      () => (testApp.services.executions.isRunning(id) ? undefined : true),
      'no run of the cancelled workflow',
      1_000,
    );
    await sleep(300);
    const workflow = await getWorkflow(testApp, tenant.key, id);
    expect(workflow.status).toBe('cancelled');
    const events = await storedEvents(testApp, id);
    expectGapFree(events);
    expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'cancelled' });
    expect(events.some((event) => event.type === 'answer')).toBe(false);
  });

  it('a cancel committed by another replica stops the run here through LISTEN/NOTIFY', async () => {
    // Another replica's connection: this one listens once it sees it.
    const other = openDatabase({ url: testApp.database.url, poolMax: 1, log: silentLog });
    await other.pool.query('SELECT 1');
    await testApp.services.hub.lookForOthers();
    expect(testApp.services.hub.hearsOthers()).toBe(true);
    const id = await startStreaming(testApp, tenant.key);
    // The transition another replica would make: its events are not
    // published to this replica's hub in-process, only NOTIFYed.
    await transitionWorkflow(other.db, {
      tenantId: tenant.id,
      workflowId: id,
      to: 'cancelled',
      events: [
        {
          type: 'workflow_end',
          step: null,
          status: 'cancelled',
          detail: { reason: 'cancelled elsewhere' },
          elapsedMs: null,
        },
      ],
      origin: 'another-replica',
    });
    await waitFor(
      () => (testApp.services.executions.isRunning(id) ? undefined : true),
      'the run to stop',
      1_000,
    );
    await sleep(300);
    const events = await storedEvents(testApp, id);
    expectGapFree(events);
    expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'cancelled' });
    expect(events.filter((event) => event.type === 'workflow_end')).toHaveLength(1);
    expect(await ledgerOutcomes(testApp, id)).toEqual(['cancelled']);
    await other.close();
  });
});

describe('leases', () => {
  it('a workflow inserted with a lease is held by its owner; an expired one is swept by another; renew and release only by the owner', async () => {
    const db = testApp.services.database.db;
    const repository = workflowsRepository(db);
    const id = randomUUID();
    await repository.insert({
      id,
      tenantId: tenant.id,
      sessionId: null,
      sessionSeq: null,
      mode: 'auto',
      model: 'scripted',
      input: 'lease me',
      tools: [],
      metadata: {},
      idempotencyKey: null,
      requestHash: null,
      lease: { owner: 'a', leaseMs: 30_000 },
    });
    const row = await repository.findById(tenant.id, id);
    if (!row) throw new Error('the inserted workflow is not stored');
    expect(row.lease_owner).toBe('a');
    const lease = { tenantId: tenant.id, id: row.id };
    const sweep = (owner: string) =>
      claimExpiredLeases(db, { owner, leaseMs: 30_000, unclaimedGraceMs: 60_000, limit: 1000 });
    expect((await sweep('b')).map((claimed) => claimed.id)).not.toContain(row.id);
    expect(await repository.renewLease({ ...lease, owner: 'b', leaseMs: 30_000 })).toBe(false);
    expect(await repository.renewLease({ ...lease, owner: 'a', leaseMs: 1 })).toBe(true);
    await sleep(20);
    expect((await sweep('b')).map((claimed) => claimed.id)).toContain(row.id);
    expect(await repository.renewLease({ ...lease, owner: 'a', leaseMs: 30_000 })).toBe(false);
    await repository.releaseLease({ ...lease, owner: 'a' });
    expect((await repository.findById(tenant.id, row.id))?.lease_owner).toBe('b');
    await repository.releaseLease({ ...lease, owner: 'b' });
    expect(await repository.findById(tenant.id, row.id)).toMatchObject({
      lease_owner: null,
      lease_expires_at: null,
    });
    // Another tenant's id never matches.
    expect(
      await repository.renewLease({ tenantId: randomUUID(), id: row.id, owner: 'b', leaseMs: 1 }),
    ).toBe(false);
  });

  it('a running workflow holds a lease of its own run, named after this replica', async () => {
    const id = await startStreaming(testApp, tenant.key);
    const { rows } = await testApp.services.database.pool.query(
      'SELECT lease_owner, lease_expires_at > now() AS held FROM workflows WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({
      lease_owner: expect.stringMatching(
        new RegExp(`^${testApp.services.replicaId}:[0-9a-f]{16}$`),
      ),
      held: true,
    });
    expect((await cancelWorkflow(testApp, tenant.key, id)).statusCode).toBe(202);
  });
});

describe('shutdown drain', () => {
  it('lets runs finish within the grace, hands the rest over to another replica, and starts none afterwards', async () => {
    const app = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue(200) });
    try {
      const operatorKey = await bootstrapOperator(app);
      const owner = await createTenant(app, operatorKey, { name: 'drain' });
      const slow = await startStreaming(app, owner.key);
      const quick = await startWorkflow(app, owner.key, { input: 'quick' });
      await waitForStatus(app, owner.key, quick, ['running', 'completed']);

      await app.services.executions.drain(1_000);
      expect(app.services.executions.size()).toBe(0);
      expect((await getWorkflow(app, owner.key, quick)).status).toBe('completed');
      // Still running, its lease ended now: the next sweep of any replica resumes it.
      expect((await getWorkflow(app, owner.key, slow)).status).toBe('running');
      const { rows } = await app.services.database.pool.query(
        'SELECT lease_owner, lease_expires_at <= now() AS expired FROM workflows WHERE id = $1',
        [slow],
      );
      expect(rows[0]).toEqual({ lease_owner: null, expired: true });
      const events = await storedEvents(app, slow);
      expectGapFree(events);
      expect(events.some((event) => event.type === 'workflow_end')).toBe(false);

      const late = await startWorkflow(app, owner.key, { input: 'too late' });
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await getWorkflow(app, owner.key, late)).toMatchObject({ status: 'queued' });
      const taken = await app.services.reclaimer.sweepOnce();
      expect(taken.map((workflow) => workflow.id)).toContain(slow);
      // Not the late one: a workflow nobody leased yet is its creator's for a few seconds.
      expect(taken.map((workflow) => workflow.id)).not.toContain(late);
    } finally {
      await app.close();
    }
  });
});
