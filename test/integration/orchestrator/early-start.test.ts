import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { workflowsRepository } from '../../../src/store/workflows.js';
import { EARLY_START_MAX_RUNS, workflowAsInserted } from '../../../src/workflows/early-start.js';
import { toWorkflow } from '../../../src/workflows/rows.js';
import {
  answer,
  offeredToolsOf,
  startToolLoopHarness,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  cancelWorkflow,
  countWorkflows,
  createSession,
  postWorkflow,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A new workflow's run starts while its insert is in flight, with the tools
 * this replica read for the tenant before (src/workflows/early-start.ts). The
 * insert is held back by a lock a second connection takes on the tenant's
 * row (the insert's foreign-key check waits for it).
 */

const h = useToolLoopHarness();

const ONE_TURN_EVENTS = [
  'workflow_start',
  'classification',
  'llm_call',
  'llm_call',
  'answer',
  'usage',
  'workflow_end',
];

/** A workflow of the tenant run to its end, so the tenant's tools are remembered. */
async function rememberTenantTools(harness = h): Promise<void> {
  harness.provider.enqueue(answer('Remembered.'));
  const { workflow } = await harness.run('A first question');
  expect(workflow.status).toBe('completed');
}

/**
 * Posts a workflow while the tenant's row is locked, so its insert waits;
 * runs `whileHeld` once the insert waits (with its backend's pid and the
 * locking connection), then releases the lock and answers the response.
 */
async function postWithInsertHeld(
  input: string | { input: string; sessionId: string },
  whileHeld: (held: { pid: number; client: pg.PoolClient }) => Promise<void>,
  harness = h,
) {
  const client = await harness.testApp.services.database.pool.connect();
  await client.query('BEGIN');
  await client.query('SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE', [harness.tenant.id]);
  const body = typeof input === 'string' ? { input } : input;
  const posted = postWorkflow(harness.testApp, harness.tenant.key, { ...body, model: 'gpt' });
  try {
    await whileHeld({ pid: await insertWaiting(harness), client });
  } finally {
    try {
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }
  return posted;
}

/** Resolves once a workflow insert waits for a lock, with its backend's pid. */
async function insertWaiting(harness = h): Promise<number> {
  let pid: number | undefined;
  await vi.waitFor(
    async () => {
      const { rows } = await harness.testApp.services.database.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query ILIKE 'insert into workflows %'`,
      );
      pid = rows[0]?.pid;
      expect(pid).toBeDefined();
    },
    { timeout: 5_000 },
  );
  return pid as number;
}

/** Resolves once the fake provider has received `count` requests in all. */
function requestsReach(count: number): Promise<void> {
  return vi.waitFor(() => expect(h.provider.requests.length).toBe(count), { timeout: 5_000 });
}

/** Long enough for a request that would go out to have gone out. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 200));

/** A workflow whose run makes no request while its insert waits, and completes once it has answered. */
async function expectStartAfterInsert(): Promise<void> {
  const requestsBefore = h.provider.requests.length;
  h.provider.enqueue(answer('After the insert.'));
  const response = await postWithInsertHeld('Start late', async () => {
    await settle();
    expect(h.provider.requests.length).toBe(requestsBefore);
  });
  const { id } = response.json() as { id: string };
  await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
}

describe('a workflow’s run starting before its insert answers', () => {
  it('the run starts as the insert would leave the workflow', async () => {
    const row = {
      id: randomUUID(),
      tenantId: h.tenant.id,
      sessionId: null,
      sessionSeq: null,
      mode: 'auto',
      model: 'gpt',
      input: 'What is 6 * 7?',
      tools: ['calculator'],
      metadata: { ticket: 7 },
      budget: { maxIterations: 3, maxTokens: null, maxCostUsd: null },
      idempotencyKey: null,
      requestHash: null,
      // Never reclaimed while the file runs: a run of it would take a scripted reply.
      lease: { owner: 'replica-test', leaseMs: 3_600_000 },
    };
    const repository = workflowsRepository(h.testApp.services.database.db);
    const { createdAt } = await repository.insert(row);
    const stored = await repository.findById(h.tenant.id, row.id);
    if (!stored) throw new Error('the inserted workflow is not stored');
    // What the service builds from the insert's answer (an early run: the same, at its own time).
    expect(workflowAsInserted(row, createdAt)).toEqual(toWorkflow(stored));
  });

  it('the first model request goes out while the insert waits; nothing of the run is stored before it commits', async () => {
    await rememberTenantTools();
    const workflowsBefore = await countWorkflows(h.testApp, h.tenant.id);
    const requestsBefore = h.provider.requests.length;
    h.provider.enqueue(answer('Early.'));
    const response = await postWithInsertHeld('Start early', async ({ client }) => {
      await requestsReach(requestsBefore + 1);
      // Its answer is in, but the run writes nothing while the insert waits (its
      // statements would wait behind the insert's row, and show in pg_stat_activity).
      await settle();
      expect(await countWorkflows(h.testApp, h.tenant.id)).toBe(workflowsBefore);
      const { rows } = await client.query<{ count: string }>(
        `SELECT count(*) AS count FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'active'
            AND query ILIKE '%workflow_events%' AND pid <> pg_backend_pid()`,
      );
      expect(Number(rows[0]?.count)).toBe(0);
    });
    expect(response.statusCode, response.body).toBe(202);
    const { id } = response.json() as { id: string };
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Early.' } });
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => event.type)).toEqual(ONE_TURN_EVENTS);
    expect(events.map((event) => event.seq)).toEqual(events.map((_event, index) => index + 1));
    expect(h.provider.requests.length).toBe(requestsBefore + 1);
  });

  it('in a session too: the first request, with the session’s history, goes out while the insert waits', async () => {
    await rememberTenantTools();
    const sessionId = await createSession(h.testApp, h.tenant.key);
    h.provider.enqueue(answer('Jupiter.'));
    const first = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Which planet is largest?',
      sessionId,
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, first, ['completed']);
    const requestsBefore = h.provider.requests.length;
    h.provider.enqueue(answer('Saturn.'));
    const response = await postWithInsertHeld(
      { input: 'And the second largest?', sessionId },
      async () => {
        await requestsReach(requestsBefore + 1);
      },
    );
    expect(response.statusCode, response.body).toBe(202);
    const { id } = response.json() as { id: string };
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Saturn.' } });
    const userTexts = (
      (h.provider.requests[requestsBefore]?.body.messages ?? []) as {
        role: string;
        content: unknown;
      }[]
    )
      .filter((message) => message.role === 'user')
      .map((message) => message.content);
    expect(userTexts).toEqual(['Which planet is largest?', 'And the second largest?']);
    const session = await h.testApp.services.sessions.get(h.tenant.id, sessionId, {
      after: 0,
      limit: 10,
    });
    expect(session.messages.map((message) => message.content)).toEqual([
      'Which planet is largest?',
      'Jupiter.',
      'And the second largest?',
      'Saturn.',
    ]);
  });

  it('a tool registered on this replica: the next workflow starts after its insert and offers it', async () => {
    await rememberTenantTools();
    const tool = await h.registerTool('/echo/registered');
    const requestsBefore = h.provider.requests.length;
    await expectStartAfterInsert();
    expect(h.provider.requests.length).toBe(requestsBefore + 1);
    expect(offeredToolsOf(h.provider.requests.at(-1))).toContain(tool);
  });

  it('a tool registered by another replica meanwhile: the early run is superseded by one offering it', async () => {
    await rememberTenantTools();
    const name = `t_${randomUUID().slice(0, 8)}`;
    await h.testApp.services.database.pool.query(
      `INSERT INTO http_tools (id, tenant_id, name, description, parameters, url, timeout_ms)
       VALUES ($1, $2, $3, 'Registered elsewhere', '{"type":"object","properties":{}}', $4, 5000)`,
      [randomUUID(), h.tenant.id, name, `${h.tools.origin}/echo/elsewhere`],
    );
    const requestsBefore = h.provider.requests.length;
    h.provider.enqueue(answer('Never read.'), answer('With the new tool.'));
    // The early run's request, made with the tools remembered from before.
    const response = await postWithInsertHeld('Start early, stale', () =>
      requestsReach(requestsBefore + 1),
    );
    expect(response.statusCode, response.body).toBe(202);
    const { id } = response.json() as { id: string };
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'With the new tool.' },
    });
    const [early, replacing] = h.provider.requests.slice(requestsBefore);
    expect(offeredToolsOf(early)).not.toContain(name);
    expect(offeredToolsOf(replacing)).toContain(name);
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((event) => event.type === 'workflow_start')).toHaveLength(1);
    expect(events.map((event) => event.seq)).toEqual(events.map((_event, index) => index + 1));
  });

  it(`with ${EARLY_START_MAX_RUNS} runs in flight on the replica, a new workflow starts after its insert`, async () => {
    await rememberTenantTools();
    const busy: string[] = [];
    for (let index = 0; index < EARLY_START_MAX_RUNS; index += 1) {
      const requests = h.provider.requests.length;
      h.provider.enqueue({ kind: 'stall' });
      busy.push(
        await startWorkflow(h.testApp, h.tenant.key, { input: `Busy ${index}`, model: 'gpt' }),
      );
      await vi.waitFor(() => expect(h.provider.requests.length).toBe(requests + 1));
    }
    await expectStartAfterInsert();
    for (const stalled of busy) {
      expect((await cancelWorkflow(h.testApp, h.tenant.key, stalled)).statusCode).toBe(202);
    }
  });

  it('an insert that fails: the early request is aborted and nothing of the workflow is left', async () => {
    await rememberTenantTools();
    const workflowsBefore = await countWorkflows(h.testApp, h.tenant.id);
    const requestsBefore = h.provider.requests.length;
    const abortedBefore = h.provider.abortedRequests();
    h.provider.enqueue({ kind: 'stall' });
    const response = await postWithInsertHeld('Never created', async ({ pid, client }) => {
      await requestsReach(requestsBefore + 1);
      // The insert fails (as on a database error): cancelled while it waits.
      await client.query('SELECT pg_cancel_backend($1)', [pid]);
    });
    expect(response.statusCode).toBeGreaterThanOrEqual(500);
    await vi.waitFor(() => expect(h.provider.abortedRequests()).toBe(abortedBefore + 1), {
      timeout: 5_000,
    });
    expect(await countWorkflows(h.testApp, h.tenant.id)).toBe(workflowsBefore);
  });

  it('a run refused while the replica shuts down releases its lease once its insert commits', async () => {
    // A harness of its own: its runs are drained, and it accepts none afterwards.
    const own = await startToolLoopHarness();
    try {
      await rememberTenantTools(own);
      // Shutting down: the registry accepts no run, so the run launched while the insert waits is refused.
      await own.testApp.services.executions.drain(0);
      const requestsBefore = own.provider.requests.length;
      const response = await postWithInsertHeld(
        'Refused early',
        async () => {
          await settle();
        },
        own,
      );
      expect(response.statusCode, response.body).toBe(202);
      const { id } = response.json() as { id: string };
      expect(own.provider.requests.length).toBe(requestsBefore);
      // Released at once, not when WORKFLOW_LEASE_MS runs out: another replica's sweep takes it over.
      await vi.waitFor(
        async () => {
          const row = await workflowsRepository(own.testApp.services.database.db).findById(
            own.tenant.id,
            id,
          );
          expect(row).toMatchObject({
            status: 'queued',
            lease_owner: null,
            lease_expires_at: null,
          });
        },
        { timeout: 2_000 },
      );
    } finally {
      await own.close();
    }
  });
});
