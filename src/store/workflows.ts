import { type RawBuilder, sql } from 'kysely';
import type { DbOrTx } from './database.js';
import { fixedStatement } from './fixed-statement.js';
import { type ListPosition, olderThan, positionMicros } from './list-position.js';
import type { WorkflowRow } from './schema.js';
import { tenantEndpointsVersion } from './tenant-endpoints.js';
import { LEASABLE, LEASABLE_ROWS, leaseExpiry } from './workflow-leases.js';

export interface NewWorkflowRow {
  id: string;
  tenantId: string;
  sessionId: string | null;
  /**
   * The session's `last_seq` as read with the session for the create
   * (sessions.ts `findWithNewestMessages`): the workflow's history runs
   * through it, a committed beginning of the session (every message up to
   * it committed with it). Null without a session.
   */
  sessionSeq: number | null;
  mode: string;
  model: string;
  input: string;
  tools: string[];
  metadata: Record<string, unknown>;
  /** The effective WorkflowBudget, stored as JSON; absent: null, its runs use the configured defaults. */
  budget?: object;
  idempotencyKey: string | null;
  requestHash: string | null;
  /**
   * The replica that creates the workflow runs it at once: its run holds
   * the lease from the insert on, instead of claiming it in a second
   * statement. `owner`: newLeaseOwner's, which the run names.
   */
  lease?: { owner: string; leaseMs: number };
}

/** Where a listing page starts: after this row in (created_at DESC, id DESC) order. */
export interface ListFilter {
  sessionId?: string;
  status?: string;
  limit: number;
  after?: ListPosition;
}

export interface ListedWorkflowRow extends WorkflowRow {
  position_us: string;
}

export interface UsageIncrement {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costUsd: number;
}

/**
 * A new workflow, queued, with the lease of the replica that runs it (none
 * without `leaseOwner`: a NULL `leaseMs` makes a NULL expiry).
 */
const insertWorkflow = fixedStatement<
  Omit<NewWorkflowRow, 'metadata' | 'budget' | 'lease'> & {
    /** JSON */
    metadata: string;
    /** JSON, or null: the runs use the configured budget. */
    budget: string | null;
    leaseOwner: string | null;
    leaseMs: number | null;
  },
  { created_at: Date; endpoints_version: string }
>(
  (slot) => sql`INSERT INTO workflows (id, tenant_id, session_id, status, mode, model, input, tools,
      metadata, budget, idempotency_key, request_hash, lease_owner, lease_expires_at, session_seq)
    SELECT ${slot.id}, ${slot.tenantId}, ${slot.sessionId}, 'queued', ${slot.mode}, ${slot.model},
      ${slot.input}, ${slot.tools}, ${slot.metadata}, ${slot.budget}, ${slot.idempotencyKey},
      ${slot.requestHash}, ${slot.leaseOwner}, ${leaseExpiry(slot.leaseMs)}, ${slot.sessionSeq}
    WHERE ${sessionStillThere(slot.tenantId, slot.sessionId)}
    RETURNING created_at, ${tenantEndpointsVersion(slot.tenantId)} AS endpoints_version`,
);

/**
 * The workflow's session still exists, held (FOR KEY SHARE, as a foreign
 * key would hold it) until the insert commits: the create read the session
 * before, and a DELETE /v1/sessions/:id between that read and the insert
 * left a workflow in a session deleted with its workflows. The session's
 * delete locks the row first (sessions.ts `deleteIfIdle`), so either it
 * waits for this insert and finds the new workflow open, or this insert
 * waits for it and inserts nothing (`unknown_session`). A session's
 * appends lock it FOR NO KEY UPDATE, which does not make the insert wait.
 */
export function sessionStillThere(
  tenantId: string | RawBuilder<unknown>,
  sessionId: string | null | RawBuilder<unknown>,
) {
  return sql<boolean>`(${sessionId}::text IS NULL OR EXISTS (
      SELECT 1 FROM sessions WHERE id = ${sessionId}::uuid AND tenant_id = ${tenantId}::uuid
      FOR KEY SHARE))`;
}

/** The insert found no session (`sessionStillThere`): it was deleted since the create read it. */
export class SessionGone extends Error {
  override name = 'SessionGone';
}

/**
 * What a workflow's insert returns: its time, and the version of its
 * tenant's tools (tenant-endpoints.ts `VersionedEndpoints`) as the insert
 * saw them.
 */
export interface InsertedWorkflow {
  createdAt: Date;
  endpointsVersion: string;
}

/**
 * The awaiting_input rows as migration 0021's partial index states them:
 * the CHECK of migration 0003 ties that status to a non-null
 * awaiting_reason (see LEASABLE_ROWS).
 */
/** What deleteIfEnded found, and did. */
export interface WorkflowDeletion {
  status: WorkflowRow['status'];
  awaiting_reason: WorkflowRow['awaiting_reason'];
  version: number;
  deleted: boolean;
}

const PAUSED_ROWS = sql<boolean>`awaiting_reason IS NOT NULL`;

/**
 * What `status` implies of the rows, for an index holding only them
 * (migration 0021: a tenant's open workflows, in the listing's order);
 * undefined for a finished status, which workflows_tenant_created serves.
 */
function rowsOfStatus(status: string) {
  if (LEASABLE.includes(status)) return LEASABLE_ROWS;
  return status === 'awaiting_input' ? PAUSED_ROWS : undefined;
}

/** What every change of a workflow row sets besides the change: README's "every change bumps `version`". */
const CHANGED = { version: sql<number>`version + 1`, updated_at: sql<Date>`now()` };

/**
 * The `workflows` rows. Every query is scoped by tenant; status changes go
 * through src/workflows/transitions.ts, never through here.
 */
export function workflowsRepository(db: DbOrTx) {
  /** A listing's rows in (created_at DESC, id DESC) order, before their columns are chosen (see `list`). */
  function listed(tenantId: string, filter: ListFilter) {
    let query = db.selectFrom('workflows').where('tenant_id', '=', tenantId);
    if (filter.sessionId !== undefined) query = query.where('session_id', '=', filter.sessionId);
    if (filter.status !== undefined) {
      query = query.where('status', '=', filter.status);
      const implied = rowsOfStatus(filter.status);
      if (implied) query = query.where(implied);
    }
    if (filter.after) query = query.where(olderThan(filter.after));
    return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(filter.limit);
  }

  return {
    /**
     * Inserts a workflow; the same statement reads the version of its
     * tenant's HTTP tools and MCP servers, which tells whether the tools
     * this replica remembers for the tenant are still its tools (its run,
     * launched at once, offers them to the model; workflows/early-start.ts).
     * It returns the row's time, the one column the caller cannot know
     * (`workflowAsInserted` there has the rest), not the row: ~30 columns
     * parsed for nothing on every create.
     */
    async insert(row: NewWorkflowRow): Promise<InsertedWorkflow> {
      const { rows } = await insertWorkflow(db, {
        id: row.id,
        tenantId: row.tenantId,
        sessionId: row.sessionId,
        sessionSeq: row.sessionSeq,
        mode: row.mode,
        model: row.model,
        input: row.input,
        tools: row.tools,
        metadata: JSON.stringify(row.metadata),
        budget: row.budget === undefined ? null : JSON.stringify(row.budget),
        idempotencyKey: row.idempotencyKey,
        requestHash: row.requestHash,
        leaseOwner: row.lease?.owner ?? null,
        leaseMs: row.lease?.leaseMs ?? null,
      });
      const inserted = rows[0];
      if (!inserted) throw new SessionGone(`the session of workflow ${row.id} is gone`);
      return { createdAt: inserted.created_at, endpointsVersion: inserted.endpoints_version };
    },

    async findById(tenantId: string, id: string): Promise<WorkflowRow | undefined> {
      return db
        .selectFrom('workflows')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Deletes the tenant's workflow, with its events, turns, plans and
     * stage attempts (ON DELETE CASCADE), if it has ended, in one
     * statement: its row is locked first, so a transition racing it either
     * commits before (and the delete sees the new status) or finds it gone.
     * Undefined when the tenant has no such workflow; else whether it was
     * deleted, and the status and version it had.
     */
    async deleteIfEnded(tenantId: string, id: string): Promise<WorkflowDeletion | undefined> {
      const { rows } = await sql<WorkflowDeletion>`
        WITH target AS (
          SELECT id, status, awaiting_reason, version FROM workflows
          WHERE tenant_id = ${tenantId} AND id = ${id}
          FOR UPDATE
        ), deleted AS (
          DELETE FROM workflows w USING target
          WHERE w.id = target.id AND target.status IN ('completed', 'failed', 'cancelled')
          RETURNING w.id
        )
        SELECT status, awaiting_reason, version, EXISTS (SELECT 1 FROM deleted) AS deleted
        FROM target`.execute(db);
      return rows[0];
    },

    /** Served by the unique index on (tenant_id, idempotency_key). */
    async findByIdempotencyKey(tenantId: string, key: string): Promise<WorkflowRow | undefined> {
      return db
        .selectFrom('workflows')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('idempotency_key', '=', key)
        .executeTakeFirst();
    },

    /**
     * Newest first, keyset-paginated on (created_at DESC, id DESC), the
     * order of the workflows_tenant_created index, and of the indexes of
     * a tenant's open workflows that an open status reads (migration
     * 0021): a page costs the same however deep it is (but for `failed`
     * and `cancelled`, which read the tenant's other finished workflows
     * between theirs), and rows created meanwhile never shift a page
     * (as OFFSET would, repeating or skipping rows). The position is
     * compared in microseconds, Postgres's own precision, so rows created
     * within one millisecond are neither repeated nor skipped.
     */
    async list(tenantId: string, filter: ListFilter): Promise<ListedWorkflowRow[]> {
      return listed(tenantId, filter).selectAll().select(positionMicros('created')).execute();
    },

    /** The ids `list` would page through, without the rows (their inputs may be large). */
    async listIds(tenantId: string, filter: ListFilter): Promise<string[]> {
      const rows = await listed(tenantId, filter).select('id').execute();
      return rows.map((row) => row.id);
    },

    /** Extends a lease `owner` holds; false when it no longer does (finished, or taken over). */
    async renewLease(input: {
      tenantId: string;
      id: string;
      owner: string;
      leaseMs: number;
    }): Promise<boolean> {
      const renewed = await db
        .updateTable('workflows')
        .set({
          lease_expires_at: leaseExpiry(input.leaseMs),
        })
        .where('tenant_id', '=', input.tenantId)
        .where('id', '=', input.id)
        .where('lease_owner', '=', input.owner)
        .executeTakeFirst();
      return renewed.numUpdatedRows > 0n;
    },

    /** Gives a lease up; a no-op when `owner` no longer holds it (a final transition clears it). */
    async releaseLease(input: { tenantId: string; id: string; owner: string }): Promise<void> {
      await db
        .updateTable('workflows')
        .set({ lease_owner: null, lease_expires_at: null })
        .where('tenant_id', '=', input.tenantId)
        .where('id', '=', input.id)
        .where('lease_owner', '=', input.owner)
        .execute();
    },

    /**
     * Gives a lease up at shutdown so that another replica takes the
     * workflow over at its next sweep: the lease ends now instead of at
     * its expiry.
     */
    async handOverLease(input: { tenantId: string; id: string; owner: string }): Promise<void> {
      await db
        .updateTable('workflows')
        .set({ lease_owner: null, lease_expires_at: sql<Date>`now()` })
        .where('tenant_id', '=', input.tenantId)
        .where('id', '=', input.id)
        .where('lease_owner', '=', input.owner)
        .where('status', 'in', LEASABLE)
        .execute();
    },

    /**
     * Keeps the text a cancelled run had streamed as the workflow's partial
     * result. Only on a cancelled workflow without a result: the cancel's
     * transition ended it, the run that was stopped adds what it had.
     */
    async keepPartialAnswer(tenantId: string, id: string, text: string): Promise<void> {
      await db
        .updateTable('workflows')
        .set({
          result: JSON.stringify({ answer: text, reason: 'cancelled' }),
          ...CHANGED,
        })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .where('status', '=', 'cancelled')
        .where('result', 'is', null)
        .execute();
    },

    /** Sets the kind the classification decided; written once per workflow. */
    async setKind(tenantId: string, id: string, kind: string): Promise<void> {
      await db
        .updateTable('workflows')
        .set({ kind, ...CHANGED })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .execute();
    },
  };
}

export type WorkflowsRepository = ReturnType<typeof workflowsRepository>;
