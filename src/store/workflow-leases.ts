import { randomUUID } from 'node:crypto';
import { type RawBuilder, sql } from 'kysely';
import type { DbOrTx } from './database.js';
import type { WorkflowRow } from './schema.js';

/**
 * Workflows' leases: which rows need a runner, the sweep's claim of those
 * whose runner is gone, and the lease owners and expiries the runs' writes
 * name (workflows.ts writes a workflow's own lease with its insert and
 * transitions).
 */

/**
 * Statuses that need a runner. The workflows_leases and
 * workflows_tenant_leasable indexes cover the same rows, as LEASABLE_ROWS
 * (migrations 0013, 0021), which a query states for the planner to use them.
 */
export const LEASABLE = ['queued', 'running'];

/**
 * The rows of each status that a partial index covers, by the columns its
 * predicate reads: the CHECK constraints of migration 0003 tie
 * awaiting_input to a non-null awaiting_reason and the finished statuses
 * to a non-null finished_at. The planner does not know that a status
 * implies them, so a query states them beside it.
 */
export const LEASABLE_ROWS = sql<boolean>`awaiting_reason IS NULL AND finished_at IS NULL`;

/**
 * Takes over, for `owner`, up to `limit` workflows that need a runner and
 * have none: their lease expired (the runner crashed or stalled, or handed
 * it over at shutdown), or the workflow has had no lease for
 * `unclaimedGraceMs` (released by a replica that could not run it, or
 * written before creation and resumption took the lease with them). The
 * grace keeps a sweep from snatching a workflow whose lease is just
 * changing hands.
 *
 * Each takeover also counts how many in a row found nothing completed
 * since the one before (`takeovers_without_progress`, migration 0012):
 * what a run completes is a tool-loop turn, a stage attempt or a plan, all
 * rows of their own, so the count reads them here and the runs' own
 * statements write nothing for it.
 *
 * Cross-tenant on purpose: it is the replicas' housekeeping, not a request.
 * `FOR UPDATE SKIP LOCKED`: replicas sweeping at the same moment each take
 * different rows and never wait on one another, and a row locked by a
 * transition in progress (a cancel, an answer) is left for the next sweep
 * rather than waited for. The claim is one statement, so two sweepers can
 * never both own a row.
 *
 * The lapsed leases and the workflows without one are read apart, each a
 * range of workflows_leases (`lease_expires_at < now()`, `IS NULL`), the
 * second only when the first leaves room. As one condition with OR, the
 * planner read the index in order and filtered it, so a sweep that took
 * nothing, every LEASE_RECLAIM_INTERVAL_MS on every replica, read every
 * queued and running workflow of every tenant: 6,022 rows in 3.7-4.3 ms
 * with 6,000 open among 300,000 workflows, against none in 0.09-0.15 ms
 * (embedded PostgreSQL 18, 2026-12-04).
 */
export async function claimExpiredLeases(
  db: DbOrTx,
  input: {
    /**
     * newLeaseOwner's, one per claim: each row is taken once by the claim,
     * so it still names one take of each workflow's lease.
     */
    owner: string;
    leaseMs: number;
    unclaimedGraceMs: number;
    limit: number;
    /** Workflows not to claim: those the claiming replica runs already. */
    exceptIds?: string[];
  },
): Promise<WorkflowRow[]> {
  // Whether a row may be claimed at all; both kinds of claim read it.
  const claimable = sql`status = ANY(${LEASABLE}::text[]) AND ${LEASABLE_ROWS}
        AND NOT (id = ANY(${input.exceptIds ?? []}::uuid[]))`;
  const claimed = await sql<WorkflowRow>`
    WITH lapsed AS (
      SELECT id, tenant_id FROM workflows
      WHERE ${claimable} AND lease_expires_at < now()
      ORDER BY lease_expires_at
      LIMIT ${input.limit}
      FOR UPDATE SKIP LOCKED
    ), unleased AS (
      SELECT id, tenant_id FROM workflows
      WHERE ${claimable} AND lease_expires_at IS NULL
        AND updated_at < now() - ${input.unclaimedGraceMs}::double precision * interval '1 millisecond'
      LIMIT ${input.limit}
      FOR UPDATE SKIP LOCKED
    ), expired AS (
      SELECT id, tenant_id FROM lapsed
      UNION ALL
      SELECT id, tenant_id FROM unleased
      LIMIT ${input.limit}
    ), progress AS (
      SELECT e.id,
        (SELECT count(*) FROM workflow_turns t
          WHERE t.workflow_id = e.id AND t.tenant_id = e.tenant_id)
        + (SELECT count(*) FROM workflow_stage_attempts a
          WHERE a.workflow_id = e.id AND a.tenant_id = e.tenant_id AND a.status = 'completed')
        + (SELECT count(*) FROM workflow_plans p
          WHERE p.workflow_id = e.id AND p.tenant_id = e.tenant_id) AS made
      FROM expired e
    )
    UPDATE workflows
    SET lease_owner = ${input.owner},
        lease_expires_at = ${leaseExpiry(input.leaseMs)},
        takeovers_without_progress = CASE
          WHEN workflows.progress_at_takeover = progress.made
            THEN workflows.takeovers_without_progress + 1
          ELSE 1
        END,
        progress_at_takeover = progress.made
    FROM progress
    WHERE workflows.id = progress.id
    RETURNING workflows.*`.execute(db);
  return claimed.rows;
}

/**
 * The lease owner of one take of a workflow's lease (a create, a user's
 * answer or review, a sweep's takeover): the replica's id, for operators
 * reading the row, and a random part of its own. The run started from that
 * take names it in every write, renewal and release. Owned by the replica
 * id alone, a run whose lease was taken over and then taken back by its own
 * replica (a review landing there) could not tell, and would write beside
 * the new run and release the lease from under it.
 *
 * The random part is a UUID's first 16 hex digits (60 random bits, one
 * digit is its version): Node draws UUIDs from a cached pool, ~0.3 µs
 * each here, where randomBytes(8) asks the kernel every time, ~7 µs (once
 * per workflow).
 */
export function newLeaseOwner(replicaId: string): string {
  return `${replicaId}:${randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

/**
 * A run's write refused because the run no longer holds the workflow's
 * lease: it was taken over while the run stalled (by another replica, or
 * by a new run on this one). The run stops and writes nothing more.
 */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
  constructor(readonly workflowId: string) {
    super(`workflow ${workflowId}: this run no longer holds its lease`);
  }
}

/**
 * `leaseMs` from now by the database's clock, the one every replica shares;
 * `leaseMs` may be a column of the statement (a batch's row).
 */
export function leaseExpiry(leaseMs: number | RawBuilder<unknown>) {
  return sql<Date>`now() + ${leaseMs}::double precision * interval '1 millisecond'`;
}
