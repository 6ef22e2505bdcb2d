import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { claimExpiredLeases } from '../../src/store/workflow-leases.js';
import {
  createReplicaTransitionBatches,
  type TransitionInput,
  transitionWorkflow,
} from '../../src/workflows/transitions.js';
import type { WorkflowStatus } from '../../src/workflows/types.js';
import { useTrackerDatabase } from '../support/tracker-database.js';
import { event, start, writers } from '../support/transition-batches.js';

const setup = useTrackerDatabase();

/** Updates of workflows rows in the current transaction: all of them, and those made in place (HOT). */
const updatesSoFar = sql<{ updated: string; hot: string }>`
  SELECT pg_stat_get_xact_tuples_updated('workflows'::regclass) AS updated,
         pg_stat_get_xact_tuples_hot_updated('workflows'::regclass) AS hot`;

async function pauseTimes(id: string) {
  const { rows } = await sql<{ paused_at: Date | null; updated_at: Date }>`
    SELECT paused_at, updated_at FROM workflows WHERE id = ${id}`.execute(setup.handle.db);
  return rows[0];
}

function change(id: string, extra: Partial<TransitionInput>): TransitionInput {
  return {
    tenantId: setup.tenantId,
    workflowId: id,
    to: 'running',
    origin: 'replica-a',
    events: [event('warning')],
    ...extra,
  };
}

describe('workflow row updates', () => {
  it('a run’s start (queued -> running, with its first turn) updates the row in place: a HOT update, no new index entries', async () => {
    const workflowId = await setup.newWorkflow();
    const counts = await setup.handle.db.transaction().execute(async (tx) => {
      await transitionWorkflow(tx, {
        tenantId: setup.tenantId,
        workflowId,
        to: 'running',
        kind: 'simple',
        durable: false,
        origin: 'replica-a',
        returning: 'seq',
        events: [
          { type: 'workflow_start', step: null, status: 'started', detail: {}, elapsedMs: null },
        ],
        turnRows: [{ turn: 1, state: JSON.stringify({ schemaVersion: 1 }) }],
      });
      return (await updatesSoFar.execute(tx)).rows[0];
    });
    expect(counts).toEqual({ updated: '1', hot: '1' });
  });

  it('an event appended between transitions updates the row in place (HOT): no index reads updated_at, which every append sets', async () => {
    const workflowId = await setup.newWorkflow();
    await transitionWorkflow(setup.handle.db, start(setup, workflowId));
    const counts = await setup.handle.db.transaction().execute(async (tx) => {
      // Counts the backend has not reported yet (PostgreSQL reports them at most once a second) are in both.
      const before = (await updatesSoFar.execute(tx)).rows[0];
      await workflowEventsRepository(tx).appendNotified({
        workflowId,
        tenantId: setup.tenantId,
        events: [event('llm_call')],
        origin: 'replica-a',
      });
      const after = (await updatesSoFar.execute(tx)).rows[0];
      return {
        updated: Number(after?.updated) - Number(before?.updated),
        hot: Number(after?.hot) - Number(before?.hot),
      };
    });
    expect(counts).toEqual({ updated: 1, hot: 1 });
  });

  it('a pause sets paused_at to its time, alone or in a batch; an event appended while paused keeps it, the resume or end that follows clears it', async () => {
    const ids = await Promise.all(Array.from({ length: 4 }, () => setup.newWorkflow()));
    for (const id of ids) await transitionWorkflow(setup.handle.db, start(setup, id));
    // One statement in flight: the first pause goes alone, the others wait and share the next.
    const batches = createReplicaTransitionBatches(setup.handle.db, {
      maxInFlight: 1,
      maxItems: 64,
      maxChars: 1_000_000,
    });
    await Promise.all(
      ids.map((id) =>
        transitionWorkflow(
          setup.handle.db,
          change(id, { to: 'awaiting_input', awaitingReason: 'clarification' }),
          batches,
        ),
      ),
    );
    const written = await writers(setup, ids);
    expect(new Set(ids.map((id) => written.get(id)?.row)).size).toBeLessThan(ids.length);
    for (const id of ids) {
      const times = await pauseTimes(id);
      expect(times?.paused_at).toEqual(times?.updated_at);
    }

    const [resumed, ended] = ids as [string, string];
    const paused = await pauseTimes(resumed);
    await workflowEventsRepository(setup.handle.db).appendNotified({
      workflowId: resumed,
      tenantId: setup.tenantId,
      events: [event('warning')],
      origin: 'replica-a',
    });
    const appended = await pauseTimes(resumed);
    expect(appended?.updated_at.getTime()).toBeGreaterThan(paused?.updated_at.getTime() ?? 0);
    expect(appended?.paused_at).toEqual(paused?.paused_at);

    await transitionWorkflow(setup.handle.db, change(resumed, { fromAwaiting: ['clarification'] }));
    await transitionWorkflow(setup.handle.db, change(ended, { to: 'cancelled' }));
    expect((await pauseTimes(resumed))?.paused_at).toBeNull();
    expect((await pauseTimes(ended))?.paused_at).toBeNull();
  });

  it('the lease sweep takes over queued and running workflows whose lease ended, and no others', async () => {
    const statuses: Array<[WorkflowStatus, string | null]> = [
      ['queued', null],
      ['running', null],
      ['awaiting_input', 'clarification'],
      ['awaiting_input', 'checkpoint'],
      ['completed', null],
      ['failed', null],
      ['cancelled', null],
    ];
    const ids = new Map<string, string>();
    for (const [status, reason] of statuses) {
      const id = await setup.newWorkflow();
      await sql`
        UPDATE workflows SET status = ${status}, awaiting_reason = ${reason},
          finished_at = CASE WHEN ${status} IN ('completed', 'failed', 'cancelled') THEN now() END,
          lease_owner = 'gone', lease_expires_at = now() - interval '1 second'
        WHERE id = ${id}`.execute(setup.handle.db);
      ids.set(id, reason ? `${status} (${reason})` : status);
    }

    const claimed = await claimExpiredLeases(setup.handle.db, {
      owner: `sweeper-${randomUUID()}`,
      leaseMs: 30_000,
      unclaimedGraceMs: 60_000,
      limit: 1000,
    });

    expect(claimed.map((row) => ids.get(row.id)).sort()).toEqual(['queued', 'running']);
  });
});
