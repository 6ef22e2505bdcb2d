import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PLANNED_EACH_RUN } from '../../src/store/prepared-statements.js';
import { createTenancyService } from '../../src/tenancy/service.js';
import { isBatchable } from '../../src/workflows/transition-batches.js';
import {
  createReplicaTransitionBatches,
  type TransitionInput,
  transitionWorkflow,
} from '../../src/workflows/transitions.js';
import type { WorkflowKind } from '../../src/workflows/types.js';
import { useEventNotifications, useTrackerDatabase } from '../support/tracker-database.js';
import { end, event, spiedBatches, start, writers } from '../support/transition-batches.js';

/**
 * Transitions sharing statements (src/workflows/transition-batches.ts)
 * against a real PostgreSQL. With one statement in flight at a time, the
 * first transition goes alone and the ones that come while it is in
 * PostgreSQL go together in the next; rows written in one transaction
 * share its id (`xmin`), which is how the tests see what shared one.
 */

const setup = useTrackerDatabase();
const { received: notifications, waitFor: waitForNotifications } = useEventNotifications(setup);

function batches() {
  return createReplicaTransitionBatches(setup.handle.db, {
    maxInFlight: 1,
    maxItems: 64,
    maxChars: 1_000_000,
  });
}

/**
 * The backend of a batch's statement once it waits for a row lock (read
 * outside the lock holder's transaction, whose view of pg_stat_activity
 * stays as it was at its first read).
 */
async function lockWaitingBatch(): Promise<number> {
  for (let tries = 0; tries < 250; tries += 1) {
    const { rows } = await sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity
      WHERE wait_event_type = 'Lock' AND starts_with(query, ${PLANNED_EACH_RUN})`.execute(
      setup.handle.db,
    );
    if (rows[0]) return rows[0].pid;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('no batch waited for the lock');
}

describe('transition batches', () => {
  it('transitions that come while one is in PostgreSQL share the next statement, each with its own row, turn, events and NOTIFY', async () => {
    const ids = await Promise.all(Array.from({ length: 6 }, () => setup.newWorkflow()));
    const shared = batches();
    const before = notifications.length;
    const results = await Promise.all(
      ids.map((id) => transitionWorkflow(setup.handle.db, start(setup, id), shared)),
    );
    for (const [index, result] of results.entries()) {
      expect(result.workflow).toMatchObject({
        id: ids[index],
        status: 'running',
        kind: 'simple',
        version: 2,
      });
      expect(result.workflow.startedAt).toBeInstanceOf(Date);
      expect(result.events.map((stored) => [stored.seq, stored.type])).toEqual([
        [1, 'workflow_start'],
        [2, 'classification'],
      ]);
      expect(await setup.storedSeqs(ids[index] as string)).toEqual([1, 2]);
    }
    const written = await writers(setup, ids);
    const transactions = ids.map((id) => written.get(id));
    // Each workflow's row, events and turn in one transaction...
    for (const one of transactions) expect(one?.events).toEqual([one?.row]);
    for (const one of transactions) expect(one?.turns).toEqual([one?.row]);
    // ...the first alone, the five that waited for it in one.
    expect(new Set(transactions.map((one) => one?.row)).size).toBe(2);
    expect(new Set(transactions.slice(1).map((one) => one?.row)).size).toBe(1);
    await waitForNotifications(before + 6);
    expect(notifications.slice(before)).toEqual(
      expect.arrayContaining(
        ids.map((id) => ({ kind: 'events', workflowId: id, lastSeq: 2, origin: 'replica-a' })),
      ),
    );
  });

  it("a batch of a run's own transitions (returning: 'seq') answers with their events alone, as each would alone; one that wants its workflow gets it", async () => {
    const ids = await Promise.all(Array.from({ length: 7 }, () => setup.newWorkflow()));
    const shared = batches();
    // The first goes alone; the next three share a batch where each asks for its seq alone.
    const first = transitionWorkflow(
      setup.handle.db,
      { ...start(setup, ids[0] as string), returning: 'seq' },
      shared,
    );
    const seqOnly = ids
      .slice(1, 4)
      .map((id) =>
        transitionWorkflow(setup.handle.db, { ...start(setup, id), returning: 'seq' }, shared),
      );
    const results = await Promise.all([first, ...seqOnly]);
    for (const [index, result] of results.entries()) {
      expect(result).not.toHaveProperty('workflow');
      expect(result.events.map((stored) => [stored.workflowId, stored.seq, stored.type])).toEqual([
        [ids[index], 1, 'workflow_start'],
        [ids[index], 2, 'classification'],
      ]);
    }
    // A batch that mixes the two: the one that wants its workflow has it, the others not.
    const held = transitionWorkflow(
      setup.handle.db,
      { ...start(setup, ids[4] as string), returning: 'seq' },
      shared,
    );
    const mixed = await Promise.all([
      transitionWorkflow(setup.handle.db, { ...start(setup, ids[5] as string) }, shared),
      transitionWorkflow(
        setup.handle.db,
        { ...start(setup, ids[6] as string), returning: 'seq' },
        shared,
      ),
    ]);
    await held;
    expect(mixed[0].workflow).toMatchObject({ id: ids[5], status: 'running', version: 2 });
    expect(mixed[1]).not.toHaveProperty('workflow');
    expect(mixed[1].events.map((stored) => stored.seq)).toEqual([1, 2]);
    const written = await writers(setup, ids.slice(4));
    expect(written.get(ids[5] as string)?.row).toBe(written.get(ids[6] as string)?.row);
    expect(written.get(ids[4] as string)?.row).not.toBe(written.get(ids[5] as string)?.row);
  });

  it("a batched transition's token text travels in its NOTIFY, after its event", async () => {
    const ids = await Promise.all(Array.from({ length: 3 }, () => setup.newWorkflow()));
    const shared = batches();
    const before = notifications.length;
    await Promise.all(
      ids.map((id, index) =>
        transitionWorkflow(
          setup.handle.db,
          start(setup, id, index === 2 ? { tokens: { text: 'Hello', afterEvents: 1 } } : {}),
          shared,
        ),
      ),
    );
    await waitForNotifications(before + 3);
    expect(notifications.slice(before)).toContainEqual({
      kind: 'events',
      workflowId: ids[2],
      lastSeq: 2,
      origin: 'replica-a',
      tokens: { text: 'Hello', afterSeq: 1 },
    });
  });

  it('an end in a batch stores its result and usage, finishes the workflow and clears its lease', async () => {
    const ids = await Promise.all(Array.from({ length: 3 }, () => setup.newWorkflow()));
    await Promise.all(ids.map((id) => transitionWorkflow(setup.handle.db, start(setup, id))));
    await sql`UPDATE workflows SET lease_owner = 'replica-a', lease_expires_at = now() + interval '1 minute'
      WHERE id = ANY(${ids}::uuid[])`.execute(setup.handle.db);
    const shared = batches();
    const ended = await Promise.all(
      ids.map((id) =>
        transitionWorkflow(
          setup.handle.db,
          {
            tenantId: setup.tenantId,
            workflowId: id,
            to: 'completed',
            result: { answer: `done ${id}`, reason: 'answered' },
            usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 2, costUsd: 0.25 },
            events: [event('answer'), event('workflow_end')],
            turnRows: [{ turn: 2, state: '{"turn":2}' }],
            origin: 'replica-a',
          },
          shared,
        ),
      ),
    );
    for (const [index, result] of ended.entries()) {
      expect(result.workflow).toMatchObject({
        status: 'completed',
        version: 3,
        result: { answer: `done ${ids[index]}` },
        usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 2, costUsd: 0.25 },
      });
      expect(result.workflow.finishedAt).toBeInstanceOf(Date);
      expect(result.events.map((stored) => stored.seq)).toEqual([3, 4]);
    }
    const written = await writers(setup, ids);
    expect(new Set(ids.slice(1).map((id) => written.get(id)?.row)).size).toBe(1);
    const leases = await sql<{ lease_owner: string | null; lease_expires_at: Date | null }>`
      SELECT lease_owner, lease_expires_at FROM workflows WHERE id = ANY(${ids}::uuid[])`.execute(
      setup.handle.db,
    );
    expect(leases.rows).toEqual(ids.map(() => ({ lease_owner: null, lease_expires_at: null })));
  });

  it('a transition its status no longer allows is left out of the batch and refused as it is alone; the others commit', async () => {
    const ids = await Promise.all(Array.from({ length: 4 }, () => setup.newWorkflow()));
    const finished = ids[2] as string;
    await transitionWorkflow(setup.handle.db, start(setup, finished));
    await transitionWorkflow(setup.handle.db, {
      tenantId: setup.tenantId,
      workflowId: finished,
      to: 'cancelled',
      events: [event('workflow_end')],
      origin: 'replica-a',
    });
    const shared = batches();
    const outcomes = await Promise.allSettled(
      ids.map((id) => transitionWorkflow(setup.handle.db, start(setup, id), shared)),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
    ]);
    expect(outcomes[2]).toMatchObject({ reason: { status: 409 } });
    expect(await setup.storedSeqs(finished)).toEqual([1, 2, 3]);
    const written = await writers(setup, [ids[1] as string, ids[3] as string]);
    expect(written.get(ids[1] as string)?.row).toBe(written.get(ids[3] as string)?.row);
  });

  it('a batch PostgreSQL refuses is made again one transition at a time: only the bad one fails', async () => {
    const ids = await Promise.all(Array.from({ length: 4 }, () => setup.newWorkflow()));
    const shared = batches();
    const outcomes = await Promise.allSettled(
      ids.map((id, index) =>
        transitionWorkflow(
          setup.handle.db,
          // A kind the table's CHECK refuses breaks the statement it is in.
          start(setup, id, index === 2 ? { kind: 'bogus' as WorkflowKind } : {}),
          shared,
        ),
      ),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
    ]);
    expect(outcomes[2]).toMatchObject({ reason: { code: '23514' } });
    expect(await setup.storedSeqs(ids[2] as string)).toEqual([]);
    const bad = await sql<{ status: string }>`
      SELECT status FROM workflows WHERE id = ${ids[2]}`.execute(setup.handle.db);
    expect(bad.rows).toEqual([{ status: 'queued' }]);
    const written = await writers(setup, ids);
    // Made again alone: the two good ones that shared the refused batch now have a transaction each.
    expect(written.get(ids[1] as string)?.row).not.toBe(written.get(ids[3] as string)?.row);
    expect(await setup.storedSeqs(ids[3] as string)).toEqual([1, 2]);
  });

  it('two transitions of one workflow never share a batch: the second waits for the next, in order', async () => {
    const [first, other, busy] = (await Promise.all([
      setup.newWorkflow(),
      setup.newWorkflow(),
      setup.newWorkflow(),
    ])) as [string, string, string];
    const db = setup.handle.db;
    const alone: TransitionInput[] = [];
    const shared = spiedBatches(setup, 1, alone);
    const results = await Promise.all([
      transitionWorkflow(db, start(setup, busy), shared),
      transitionWorkflow(db, start(setup, first), shared),
      transitionWorkflow(db, end(setup, first), shared),
      transitionWorkflow(db, start(setup, other), shared),
    ]);
    expect(results.map((result) => result.workflow.status)).toEqual([
      'running',
      'running',
      'completed',
      'running',
    ]);
    // `busy` alone; `first`'s start with `other`'s; then `first`'s end, alone in the statement after.
    expect(alone.map((input) => [input.workflowId, input.to])).toEqual([
      [busy, 'running'],
      [first, 'completed'],
    ]);
    expect(await setup.storedSeqs(first)).toEqual([1, 2, 3]);
    const written = await writers(setup, [first, other]);
    expect(written.get(first)?.events).toContain(written.get(other)?.row);
  });

  it("a workflow's next transition waits for the one still in PostgreSQL, even with a slot free", async () => {
    const [first, other] = (await Promise.all([setup.newWorkflow(), setup.newWorkflow()])) as [
      string,
      string,
    ];
    const db = setup.handle.db;
    const alone: TransitionInput[] = [];
    const shared = spiedBatches(setup, 2, alone);
    const results = await Promise.all([
      transitionWorkflow(db, start(setup, first), shared),
      transitionWorkflow(db, end(setup, first), shared),
      transitionWorkflow(db, start(setup, other), shared),
    ]);
    expect(results.map((result) => result.workflow.status)).toEqual([
      'running',
      'completed',
      'running',
    ]);
    // The second slot went to `other`; `first`'s end, once its start had committed.
    expect(alone.map((input) => [input.workflowId, input.to])).toEqual([
      [first, 'running'],
      [other, 'running'],
      [first, 'completed'],
    ]);
  });

  it("two tenants' transitions never share a statement: each batch is one tenant's", async () => {
    const { tenant } = await createTenancyService(setup.handle.db).createTenant({
      name: 'another tenant',
    });
    const busy = await setup.newWorkflow();
    const ours = await Promise.all([setup.newWorkflow(), setup.newWorkflow()]);
    const theirs = await Promise.all([setup.newWorkflow(tenant.id), setup.newWorkflow(tenant.id)]);
    const db = setup.handle.db;
    const alone: TransitionInput[] = [];
    const shared = spiedBatches(setup, 1, alone);
    const theirStart = (id: string) => start(setup, id, { tenantId: tenant.id });
    const results = await Promise.all([
      transitionWorkflow(db, start(setup, busy), shared),
      transitionWorkflow(db, start(setup, ours[0] as string), shared),
      transitionWorkflow(db, theirStart(theirs[0] as string), shared),
      transitionWorkflow(db, start(setup, ours[1] as string), shared),
      transitionWorkflow(db, theirStart(theirs[1] as string), shared),
    ]);
    expect(results.map((result) => [result.workflow.tenantId, result.workflow.status])).toEqual([
      [setup.tenantId, 'running'],
      [setup.tenantId, 'running'],
      [tenant.id, 'running'],
      [setup.tenantId, 'running'],
      [tenant.id, 'running'],
    ]);
    expect(alone.map((input) => input.workflowId)).toEqual([busy]);
    // A statement is scoped by one tenant: had the two shared one, the
    // other tenant's transitions would have been refused in it and made
    // one by one instead.
    const written = await writers(setup, [...ours, ...theirs]);
    const transaction = (id: string | undefined) => written.get(id as string)?.row;
    expect(transaction(ours[0])).toBe(transaction(ours[1]));
    expect(transaction(theirs[0])).toBe(transaction(theirs[1]));
    expect(transaction(ours[0])).not.toBe(transaction(theirs[0]));
  });

  it('a batch whose backend is terminated fails each of its transitions, none made again alone: it may have committed', async () => {
    const [busy, ...ids] = (await Promise.all(
      Array.from({ length: 4 }, () => setup.newWorkflow()),
    )) as [string, ...string[]];
    const db = setup.handle.db;
    const blocker = new pg.Client({ connectionString: setup.database.url });
    await blocker.connect();
    try {
      // The batch will wait for this row's lock, which is where its backend is terminated.
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [ids[1]]);
      const alone: TransitionInput[] = [];
      const shared = spiedBatches(setup, 1, alone);
      const first = transitionWorkflow(db, start(setup, busy), shared);
      const batched = Promise.allSettled(
        ids.map((id) => transitionWorkflow(db, start(setup, id), shared)),
      );
      await first;
      const pid = await lockWaitingBatch();
      await blocker.query('SELECT pg_terminate_backend($1)', [pid]);
      await blocker.query('ROLLBACK');
      const outcomes = await batched;
      expect(outcomes.map((outcome) => outcome.status)).toEqual([
        'rejected',
        'rejected',
        'rejected',
      ]);
      expect(outcomes[0]).toMatchObject({ reason: { code: '57P01' } });
      expect(alone.map((input) => input.workflowId)).toEqual([busy]);
      // Read on the blocker's connection: the pool may hand out the
      // terminated one once more before it sees it close.
      const { rows } = await blocker.query<{ status: string; events: string }>(
        `SELECT status, (SELECT count(*) FROM workflow_events e WHERE e.workflow_id = w.id) AS events
         FROM workflows w WHERE id = ANY($1::uuid[])`,
        [ids],
      );
      expect(rows).toEqual(ids.map(() => ({ status: 'queued', events: '0' })));
    } finally {
      await blocker.end();
    }
  });

  it('what has checks or writes of its own goes alone', () => {
    const base = start(setup, '00000000-0000-4000-8000-000000000000');
    expect(isBatchable(base)).toBe(true);
    expect(isBatchable({ ...base, expectedVersion: 2 })).toBe(false);
    expect(isBatchable({ ...base, fromAwaiting: ['clarification'] })).toBe(false);
    expect(isBatchable({ ...base, lease: { owner: 'replica-a', leaseMs: 1000 } })).toBe(false);
    expect(isBatchable({ ...base, to: 'failed' })).toBe(false);
    expect(isBatchable({ ...base, to: 'cancelled' })).toBe(false);
    expect(isBatchable({ ...base, alsoSelect: [sql`1 AS also_one`] })).toBe(false);
    expect(isBatchable({ ...base, alsoInStatement: [sql`x AS (SELECT 1)`] })).toBe(false);
  });
});
