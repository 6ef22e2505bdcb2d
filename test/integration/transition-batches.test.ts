import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_CHANNEL, type NewEventRow } from '../../src/store/workflow-events.js';
import { type Notification, parseNotification } from '../../src/tracker/notification.js';
import { createTransitionBatches, isBatchable } from '../../src/workflows/transition-batches.js';
import {
  createReplicaTransitionBatches,
  type TransitionInput,
  transitionWorkflow,
} from '../../src/workflows/transitions.js';
import type { WorkflowKind } from '../../src/workflows/types.js';
import { useTrackerDatabase } from '../support/tracker-database.js';

/**
 * Transitions sharing statements (src/workflows/transition-batches.ts)
 * against a real PostgreSQL. With one statement in flight at a time, the
 * first transition goes alone and the ones that come while it is in
 * PostgreSQL go together in the next; rows written in one transaction
 * share its id (`xmin`), which is how the tests see what shared one.
 */

const setup = useTrackerDatabase();
const notifications: Notification[] = [];
let listener: pg.Client;

beforeAll(async () => {
  listener = new pg.Client({ connectionString: setup.database.url });
  await listener.connect();
  listener.on('notification', (message) => {
    const parsed = message.payload ? parseNotification(message.payload) : undefined;
    if (parsed) notifications.push(parsed);
  });
  await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
});
afterAll(async () => {
  await listener?.end();
});

function event(type: string, detail: Record<string, unknown> = {}): NewEventRow {
  return { type, step: null, status: 'completed', detail, elapsedMs: null };
}

function start(workflowId: string, extra: Partial<TransitionInput> = {}): TransitionInput {
  return {
    tenantId: setup.tenantId,
    workflowId,
    to: 'running',
    kind: 'simple',
    events: [event('workflow_start'), event('classification')],
    turnRows: [{ turn: 1, state: JSON.stringify({ schemaVersion: 1, turn: 1, of: workflowId }) }],
    durable: false,
    origin: 'replica-a',
    ...extra,
  };
}

/** A workflow's end, as a run makes it. */
function end(workflowId: string): TransitionInput {
  return {
    tenantId: setup.tenantId,
    workflowId,
    to: 'completed',
    result: { answer: 'done', reason: 'answered' },
    events: [event('workflow_end')],
    origin: 'replica-a',
  };
}

function batches() {
  return createReplicaTransitionBatches(setup.handle.db, {
    maxInFlight: 1,
    maxItems: 64,
    maxChars: 1_000_000,
  });
}

/** Batches that record, in order, the transitions they make alone. */
function spiedBatches(maxInFlight: number, alone: TransitionInput[]) {
  const db = setup.handle.db;
  return createTransitionBatches({
    db,
    maxInFlight,
    maxItems: 64,
    maxChars: 1_000_000,
    alone: (input) => {
      alone.push(input);
      return transitionWorkflow(db, input);
    },
  });
}

/** The transactions that wrote each workflow's row, events and turns. */
async function writers(workflowIds: string[]) {
  const { rows } = await sql<{ id: string; row: string; events: string[]; turns: string[] }>`
    SELECT w.id, w.xmin::text AS row,
      (SELECT array_agg(DISTINCT e.xmin::text) FROM workflow_events e WHERE e.workflow_id = w.id) AS events,
      (SELECT array_agg(DISTINCT t.xmin::text) FROM workflow_turns t WHERE t.workflow_id = w.id) AS turns
    FROM workflows w WHERE w.id = ANY(${workflowIds}::uuid[])`.execute(setup.handle.db);
  return new Map(rows.map((row) => [row.id, row]));
}

async function waitForNotifications(count: number): Promise<void> {
  for (let tries = 0; notifications.length < count && tries < 100; tries += 1) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('transition batches', () => {
  it('transitions that come while one is in PostgreSQL share the next statement, each with its own row, turn, events and NOTIFY', async () => {
    const ids = await Promise.all(Array.from({ length: 6 }, () => setup.newWorkflow()));
    const shared = batches();
    const before = notifications.length;
    const results = await Promise.all(
      ids.map((id) => transitionWorkflow(setup.handle.db, start(id), shared)),
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
    const written = await writers(ids);
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

  it("a batched transition's token text travels in its NOTIFY, after its event", async () => {
    const ids = await Promise.all(Array.from({ length: 3 }, () => setup.newWorkflow()));
    const shared = batches();
    const before = notifications.length;
    await Promise.all(
      ids.map((id, index) =>
        transitionWorkflow(
          setup.handle.db,
          start(id, index === 2 ? { tokens: { text: 'Hello', afterEvents: 1 } } : {}),
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
    await Promise.all(ids.map((id) => transitionWorkflow(setup.handle.db, start(id))));
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
    const written = await writers(ids);
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
    await transitionWorkflow(setup.handle.db, start(finished));
    await transitionWorkflow(setup.handle.db, {
      tenantId: setup.tenantId,
      workflowId: finished,
      to: 'cancelled',
      events: [event('workflow_end')],
      origin: 'replica-a',
    });
    const shared = batches();
    const outcomes = await Promise.allSettled(
      ids.map((id) => transitionWorkflow(setup.handle.db, start(id), shared)),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
    ]);
    expect(outcomes[2]).toMatchObject({ reason: { status: 409 } });
    expect(await setup.storedSeqs(finished)).toEqual([1, 2, 3]);
    const written = await writers([ids[1] as string, ids[3] as string]);
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
          start(id, index === 2 ? { kind: 'bogus' as WorkflowKind } : {}),
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
    const written = await writers(ids);
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
    const shared = spiedBatches(1, alone);
    const results = await Promise.all([
      transitionWorkflow(db, start(busy), shared),
      transitionWorkflow(db, start(first), shared),
      transitionWorkflow(db, end(first), shared),
      transitionWorkflow(db, start(other), shared),
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
    const written = await writers([first, other]);
    expect(written.get(first)?.events).toContain(written.get(other)?.row);
  });

  it("a workflow's next transition waits for the one still in PostgreSQL, even with a slot free", async () => {
    const [first, other] = (await Promise.all([setup.newWorkflow(), setup.newWorkflow()])) as [
      string,
      string,
    ];
    const db = setup.handle.db;
    const alone: TransitionInput[] = [];
    const shared = spiedBatches(2, alone);
    const results = await Promise.all([
      transitionWorkflow(db, start(first), shared),
      transitionWorkflow(db, end(first), shared),
      transitionWorkflow(db, start(other), shared),
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

  it('what has checks or writes of its own goes alone', () => {
    const base = start('00000000-0000-4000-8000-000000000000');
    expect(isBatchable(base)).toBe(true);
    expect(isBatchable({ ...base, expectedVersion: 2 })).toBe(false);
    expect(isBatchable({ ...base, fromAwaiting: ['clarification'] })).toBe(false);
    expect(isBatchable({ ...base, lease: { owner: 'replica-a', leaseMs: 1000 } })).toBe(false);
    expect(isBatchable({ ...base, to: 'failed' })).toBe(false);
    expect(isBatchable({ ...base, to: 'cancelled' })).toBe(false);
    expect(isBatchable({ ...base, alsoSelect: [sql`1 AS also_one`] })).toBe(false);
    expect(isBatchable({ ...base, alsoInStatement: [sql`x AS (SELECT 1)`] })).toBe(false);
    expect(isBatchable({ ...base, alsoInTransaction: async () => {} })).toBe(false);
  });
});
