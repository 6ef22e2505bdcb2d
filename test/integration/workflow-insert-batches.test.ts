import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { createWorkflowInsertBatches } from '../../src/store/workflow-insert-batches.js';
import {
  type NewWorkflowRow,
  SessionGone,
  workflowsRepository,
} from '../../src/store/workflows.js';
import { useTrackerDatabase } from '../support/tracker-database.js';

/**
 * New workflows sharing statements (src/store/workflow-insert-batches.ts)
 * against a real PostgreSQL. With one statement in flight at a time, the
 * first insert goes alone and the ones that come while it is in
 * PostgreSQL go together in the next; rows written in one transaction
 * share its id (`xmin`).
 */

const setup = useTrackerDatabase();

function newRow(extra: Partial<NewWorkflowRow> = {}): NewWorkflowRow {
  return {
    id: randomUUID(),
    tenantId: setup.tenantId,
    sessionId: null,
    sessionSeq: null,
    mode: 'simple',
    model: 'scripted',
    input: 'What is 6 * 7?',
    tools: ['calculator'],
    metadata: { from: 'test' },
    budget: { maxIterations: 3 },
    idempotencyKey: null,
    requestHash: null,
    lease: { owner: 'replica-a', leaseMs: 60_000 },
    ...extra,
  };
}

function batches(alone: NewWorkflowRow[], maxChars = 1_000_000) {
  const repository = workflowsRepository(setup.handle.db);
  return createWorkflowInsertBatches({
    db: setup.handle.db,
    maxInFlight: 1,
    maxItems: 64,
    maxChars,
    alone: (row) => {
      alone.push(row);
      return repository.insert(row);
    },
  });
}

async function stored(ids: string[]) {
  const { rows } = await sql<{
    id: string;
    writer: string;
    status: string;
    mode: string;
    tools: string[];
    metadata: unknown;
    budget: unknown;
    lease_owner: string | null;
    leased: boolean;
    created_at: Date;
  }>`SELECT id, xmin::text AS writer, status, mode, tools, metadata, budget, lease_owner,
      lease_expires_at > now() + interval '50 seconds' AS leased, created_at
    FROM workflows WHERE id = ANY(${ids}::uuid[])`.execute(setup.handle.db);
  return new Map(rows.map((row) => [row.id, row]));
}

describe('workflow insert batches', () => {
  it('workflows created while an insert is in PostgreSQL share the next statement, each stored whole, with the version of the tenant’s tools', async () => {
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone);
    const rows = Array.from({ length: 5 }, () => newRow());
    const inserted = await Promise.all(rows.map((row) => shared.run(row)));
    expect(alone.map((row) => row.id)).toEqual([rows[0]?.id]);
    const byId = await stored(rows.map((row) => row.id));
    const writers = rows.map((row) => byId.get(row.id)?.writer);
    expect(new Set(writers).size).toBe(2);
    expect(new Set(writers.slice(1)).size).toBe(1);
    const { version } = await listTenantEndpoints(setup.handle.db, setup.tenantId);
    for (const [index, row] of rows.entries()) {
      expect(byId.get(row.id)).toMatchObject({
        status: 'queued',
        mode: 'simple',
        tools: ['calculator'],
        metadata: { from: 'test' },
        budget: { maxIterations: 3 },
        lease_owner: 'replica-a',
        leased: true,
      });
      expect(inserted[index]?.createdAt.getTime()).toBe(byId.get(row.id)?.created_at.getTime());
      expect(inserted[index]?.endpointsVersion).toBe(version);
    }
  });

  it('a batch PostgreSQL refuses is inserted again one workflow at a time: only the bad one fails', async () => {
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone);
    // A mode the table's CHECK refuses breaks the statement it is in.
    const rows = [newRow(), newRow(), newRow({ mode: 'bogus' }), newRow()];
    const outcomes = await Promise.allSettled(rows.map((row) => shared.run(row)));
    // Each made again alone; only the bogus one failed, with the CHECK's violation.
    expect(alone.map((row) => row.id)).toEqual(rows.map((row) => row.id));
    const failed = outcomes.flatMap((outcome, index) =>
      outcome.status === 'rejected'
        ? [{ index, code: (outcome.reason as { code?: string }).code }]
        : [],
    );
    expect(failed).toEqual([{ index: 2, code: '23514' }]);
    const byId = await stored(rows.map((row) => row.id));
    expect([...byId.keys()].sort()).toEqual(
      [rows[0], rows[1], rows[3]].map((row) => row?.id).sort(),
    );
  });

  it('a batch with a workflow whose session is gone inserts the others; that one alone fails with SessionGone', async () => {
    const session = randomUUID();
    await sql`INSERT INTO sessions (id, tenant_id) VALUES (${session}, ${setup.tenantId})`.execute(
      setup.handle.db,
    );
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone);
    // The first goes alone; the next three share a statement, in which one names a deleted session.
    const gone = randomUUID();
    const rows = [
      newRow(),
      newRow({ sessionId: session, sessionSeq: 0 }),
      newRow({ sessionId: gone, sessionSeq: 0 }),
      newRow(),
    ];
    const outcomes = await Promise.allSettled(rows.map((row) => shared.run(row)));
    const failed = outcomes.flatMap((outcome, index) =>
      outcome.status === 'rejected' ? [{ index, reason: outcome.reason as unknown }] : [],
    );
    expect(failed).toEqual([{ index: 2, reason: expect.any(SessionGone) }]);
    const byId = await stored(rows.map((row) => row.id));
    expect([...byId.keys()].sort()).toEqual(
      [rows[0], rows[1], rows[3]].map((row) => row?.id).sort(),
    );
  });

  it('keyed workflows share statements with their keys; a taken key fails its own insert alone, with the unique violation the create replays on', async () => {
    const taken = `key-${randomUUID()}`;
    await workflowsRepository(setup.handle.db).insert(
      newRow({ idempotencyKey: taken, requestHash: 'h0' }),
    );
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone);
    const keyed = (key: string) => newRow({ idempotencyKey: key, requestHash: `h-${key}` });
    // The first goes alone; the next three would share a statement, which the taken key breaks.
    const rows = [keyed(`a-${randomUUID()}`), keyed(`b-${randomUUID()}`), keyed(taken), newRow()];
    const outcomes = await Promise.allSettled(rows.map((row) => shared.run(row)));
    const failed = outcomes.flatMap((outcome, index) =>
      outcome.status === 'rejected'
        ? [{ index, reason: outcome.reason as { code?: string; constraint?: string } }]
        : [],
    );
    expect(failed.map(({ index, reason }) => [index, reason.code, reason.constraint])).toEqual([
      [2, '23505', 'workflows_idempotency'],
    ]);
    const { rows: keys } = await sql<{ id: string; idempotency_key: string | null }>`
      SELECT id, idempotency_key FROM workflows WHERE id = ANY(${rows.map((row) => row.id)}::uuid[])`.execute(
      setup.handle.db,
    );
    expect(new Map(keys.map((row) => [row.id, row.idempotency_key]))).toEqual(
      new Map([rows[0], rows[1], rows[3]].map((row) => [row?.id, row?.idempotencyKey ?? null])),
    );
  });

  it('a workflow without a lease is stored without one', async () => {
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone);
    const rows = [newRow(), newRow({ lease: undefined }), newRow({ budget: undefined })];
    await Promise.all(rows.map((row) => shared.run(row)));
    const byId = await stored(rows.map((row) => row.id));
    expect(byId.get(rows[1]?.id as string)).toMatchObject({ lease_owner: null, leased: null });
    expect(byId.get(rows[2]?.id as string)).toMatchObject({ budget: null, leased: true });
    expect(byId.get(rows[1]?.id as string)?.writer).toBe(byId.get(rows[2]?.id as string)?.writer);
  });

  it('a batch holds at most maxChars of the questions: what does not fit waits for the next, in order', async () => {
    const alone: NewWorkflowRow[] = [];
    const shared = batches(alone, 100);
    const rows = [60, 60, 30, 60].map((length) => newRow({ input: 'q'.repeat(length) }));
    await Promise.all(rows.map((row) => shared.run(row)));
    // The first alone (a slot was free); 60 + 30 together; the last 60 did not fit with them.
    expect(alone.map((row) => row.id)).toEqual([rows[0]?.id, rows[3]?.id]);
    const byId = await stored(rows.map((row) => row.id));
    expect(byId.get(rows[1]?.id as string)?.writer).toBe(byId.get(rows[2]?.id as string)?.writer);
    expect(byId.get(rows[3]?.id as string)?.writer).not.toBe(
      byId.get(rows[2]?.id as string)?.writer,
    );
  });
});
