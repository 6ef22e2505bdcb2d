import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { claimExpiredLeases } from '../../src/store/workflows.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import type { WorkflowStatus } from '../../src/workflows/types.js';
import { useTrackerDatabase } from '../support/tracker-database.js';

const setup = useTrackerDatabase();

/** Updates of workflows rows in the current transaction: all of them, and those made in place (HOT). */
const updatesSoFar = sql<{ updated: string; hot: string }>`
  SELECT pg_stat_get_xact_tuples_updated('workflows'::regclass) AS updated,
         pg_stat_get_xact_tuples_hot_updated('workflows'::regclass) AS hot`;

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
