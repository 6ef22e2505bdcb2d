import { describe, expect, it } from 'vitest';
import type { TurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import { loadPipelineRows } from '../../../src/store/pipeline-rows.js';
import { endedAttemptError } from '../../../src/store/pipeline-transition-writes.js';
import { pipelinesRepository } from '../../../src/store/pipelines.js';
import { workflowEventsRepository } from '../../../src/store/workflow-events.js';
import { claimExpiredLeases } from '../../../src/store/workflow-leases.js';
import { workflowsRepository } from '../../../src/store/workflows.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  DEAD_RUN,
  openWork,
  orphanedWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A workflow taken over again and again with nothing completed in between
 * (its run may be what kills its runners) is failed after
 * WORKFLOW_MAX_TAKEOVERS such takeovers in a row, instead of being passed
 * from replica to replica forever. What a run completes (a turn, a stage
 * attempt, a plan) starts the count again.
 */

const MAX_TAKEOVERS = 2;

const h = useToolLoopHarness({ env: { WORKFLOW_MAX_TAKEOVERS: String(MAX_TAKEOVERS) } });

const pool = () => h.testApp.services.database.pool;
/** The replica whose sweeps the tests make. */
const SWEEPER = 'test-sweeper';

/** A running workflow whose runner died holding its lease, its count of takeovers as given. */
async function orphaned(takeovers?: { count: number; progress: number }): Promise<string> {
  const id = await orphanedWorkflow(h.testApp, h.tenant.id);
  if (takeovers) {
    await pool().query(
      'UPDATE workflows SET takeovers_without_progress = $2, progress_at_takeover = $3 WHERE id = $1',
      [id, takeovers.count, takeovers.progress],
    );
  }
  return id;
}

/** The runner that took it over dies too: its lease expires while held. */
async function expireLease(id: string): Promise<void> {
  await pool().query(
    `UPDATE workflows SET lease_owner = 'dead-sweeper', lease_expires_at = now() - interval '1 second' WHERE id = $1`,
    [id],
  );
}

/** One sweep by a replica that runs nothing (the claim alone); the workflow's count after it. */
async function claim(id: string): Promise<number | undefined> {
  const rows = await claimExpiredLeases(h.testApp.services.database.db, {
    owner: SWEEPER,
    leaseMs: 30_000,
    unclaimedGraceMs: 60_000,
    limit: 1000,
  });
  return rows.find((row) => row.id === id)?.takeovers_without_progress;
}

async function completeTurn(id: string, turn: number): Promise<void> {
  const state: TurnState = {
    schemaVersion: 1,
    turn,
    model: 'gpt',
    assistant: { content: '', toolCalls: [] },
    toolResults: [],
    awaiting: null,
    finishReason: 'tool_calls',
  };
  await workflowEventsRepository(h.testApp.services.database.db).appendNotified({
    tenantId: h.tenant.id,
    workflowId: id,
    events: [],
    writes: [turnWrite(state)],
    origin: 'test',
  });
}

async function endWorkflow(id: string): Promise<void> {
  await pool().query(
    `UPDATE workflows SET status = 'cancelled', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`,
    [id],
  );
}

describe('counting takeovers without progress', () => {
  it('counts takeovers in a row, a hand-over among them; a completed turn starts the count again', async () => {
    const id = await orphaned();
    expect(await claim(id)).toBe(1);
    await expireLease(id);
    expect(await claim(id)).toBe(2);
    // Handed over at a shutdown: taken over all the same, and counted.
    await workflowsRepository(h.testApp.services.database.db).handOverLease({
      tenantId: h.tenant.id,
      id,
      owner: SWEEPER,
    });
    expect(await claim(id)).toBe(3);
    await completeTurn(id, 1);
    await expireLease(id);
    expect(await claim(id)).toBe(1);
    await expireLease(id);
    expect(await claim(id)).toBe(2);
    await endWorkflow(id);
  });

  it('a completed stage attempt or a plan is progress; a failed (interrupted) attempt is not', async () => {
    const id = await orphaned();
    expect(await claim(id)).toBe(1);
    await pool().query(
      `INSERT INTO workflow_plans (workflow_id, revision, tenant_id, plan) VALUES ($1, 1, $2, '{}')`,
      [id, h.tenant.id],
    );
    await expireLease(id);
    expect(await claim(id)).toBe(1);
    const attempt = (status: string, number: number) =>
      pool().query(
        `INSERT INTO workflow_stage_attempts
           (workflow_id, stage_id, attempt, tenant_id, plan_revision, status, reason, started_at, finished_at)
         VALUES ($1, 'stage-1', $3, $2, 1, $4, 'first', now(), now())`,
        [id, h.tenant.id, number, status],
      );
    await attempt('failed', 1);
    await expireLease(id);
    expect(await claim(id)).toBe(2);
    await attempt('completed', 2);
    await expireLease(id);
    expect(await claim(id)).toBe(1);
    await endWorkflow(id);
  });

  it('a live lease is neither taken nor counted', async () => {
    const id = await orphaned({ count: 1, progress: 0 });
    await pool().query(
      `UPDATE workflows SET lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
      [id],
    );
    expect(await claim(id)).toBeUndefined();
    const { rows } = await pool().query(
      'SELECT takeovers_without_progress FROM workflows WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ takeovers_without_progress: 1 });
    await endWorkflow(id);
  });
});

describe('a workflow that keeps stopping at the same point', () => {
  it(`is resumed at takeover ${MAX_TAKEOVERS} in a row without progress, the most allowed`, async () => {
    const id = await orphaned({ count: MAX_TAKEOVERS - 1, progress: 0 });
    h.provider.enqueue(answer('It is 42.'));
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).toContain(id);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
  });

  it('is failed with too_many_takeovers at the next one, without a model call', async () => {
    const id = await orphaned({ count: MAX_TAKEOVERS, progress: 0 });
    const requestsBefore = h.provider.requests.length;
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).toContain(id);

    const failed = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(failed).toMatchObject({
      status: 'failed',
      error: { code: 'too_many_takeovers' },
    });
    expect(h.provider.requests.length).toBe(requestsBefore);
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => event.type)).toEqual(['workflow_end']);
    expect(events[0]).toMatchObject({
      status: 'failed',
      detail: { error: { code: 'too_many_takeovers' } },
    });
    const { rows } = await pool().query(
      'SELECT lease_owner, lease_expires_at FROM workflows WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ lease_owner: null, lease_expires_at: null });
  });

  it('failed so, the calls and the stage attempt its last run left open end with it', async () => {
    const id = await orphaned({ count: MAX_TAKEOVERS, progress: 0 });
    const db = h.testApp.services.database.db;
    const attempt = { tenantId: h.tenant.id, workflowId: id, stageId: 'gather', attempt: 1 };
    await pipelinesRepository(db).startAttempt({
      ...attempt,
      heldBy: DEAD_RUN,
      planRevision: 1,
      reason: 'first',
      feedback: null,
    });
    await workflowEventsRepository(db).appendNotified({
      tenantId: h.tenant.id,
      workflowId: id,
      events: [
        {
          type: 'stage',
          step: 'gather',
          status: 'started',
          detail: { stage: 'gather', title: 'Gather', attempt: 1, reason: 'first' },
          elapsedMs: null,
        },
        {
          type: 'tool_call',
          step: 'gather/turn-1',
          status: 'started',
          detail: { tool: 'calculator', callId: 'call_1' },
          elapsedMs: null,
        },
      ],
      origin: DEAD_RUN,
    });
    await h.testApp.services.reclaimer.sweepOnce();
    await waitForStatus(h.testApp, h.tenant.key, id, ['failed']);
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => [event.type, event.status, event.detail.error])).toEqual([
      ['stage', 'started', undefined],
      ['tool_call', 'started', undefined],
      ['tool_call', 'failed', 'interrupted'],
      ['stage', 'failed', endedAttemptError('failed')],
      ['workflow_end', 'failed', expect.objectContaining({ code: 'too_many_takeovers' })],
    ]);
    expect(openWork(events)).toEqual([]);
    const { attempts } = await loadPipelineRows(db, attempt);
    expect(attempts[0]).toMatchObject({ status: 'failed', error: endedAttemptError('failed') });
  });
});
