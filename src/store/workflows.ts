import { sql } from 'kysely';
import type { DbOrTx } from './database.js';
import type { WorkflowRow } from './schema.js';

export interface NewWorkflowRow {
  id: string;
  tenantId: string;
  sessionId: string | null;
  mode: string;
  model: string;
  input: string;
  tools: string[];
  metadata: Record<string, unknown>;
  idempotencyKey: string | null;
  requestHash: string | null;
}

/** Where a listing page starts: after this row in (created_at DESC, id DESC) order. */
export interface ListPosition {
  /** created_at in microseconds since the epoch: a JS Date would drop the microseconds Postgres keeps. */
  createdAtUs: string;
  id: string;
}

export interface ListFilter {
  sessionId?: string;
  status?: string;
  limit: number;
  after?: ListPosition;
}

export interface ListedWorkflowRow extends WorkflowRow {
  created_at_us: string;
}

export interface UsageIncrement {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costUsd: number;
}

/** Statuses that need a runner (the workflows_leases index covers the same ones). */
const LEASABLE = ['queued', 'running'];

/**
 * The `workflows` rows. Every query is scoped by tenant; status changes go
 * through src/workflows/transitions.ts, never through here.
 */
export function workflowsRepository(db: DbOrTx) {
  return {
    async insert(row: NewWorkflowRow): Promise<WorkflowRow> {
      return db
        .insertInto('workflows')
        .values({
          id: row.id,
          tenant_id: row.tenantId,
          session_id: row.sessionId,
          status: 'queued',
          awaiting_reason: null,
          mode: row.mode,
          kind: null,
          model: row.model,
          input: row.input,
          tools: row.tools,
          metadata: JSON.stringify(row.metadata),
          idempotency_key: row.idempotencyKey,
          request_hash: row.requestHash,
          lease_owner: null,
          lease_expires_at: null,
          result: null,
          error: null,
          started_at: null,
          finished_at: null,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
    },

    async findById(tenantId: string, id: string): Promise<WorkflowRow | undefined> {
      return db
        .selectFrom('workflows')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
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
     * order of the workflows_tenant_created index: a page costs the same
     * however deep it is, and rows created meanwhile never shift a page
     * (as OFFSET would, repeating or skipping rows). The position is
     * compared in microseconds, Postgres's own precision, so rows created
     * within one millisecond are neither repeated nor skipped.
     */
    async list(tenantId: string, filter: ListFilter): Promise<ListedWorkflowRow[]> {
      let query = db
        .selectFrom('workflows')
        .selectAll()
        .select(
          sql<string>`(extract(epoch from created_at) * 1000000)::bigint::text`.as('created_at_us'),
        )
        .where('tenant_id', '=', tenantId);
      if (filter.sessionId !== undefined) query = query.where('session_id', '=', filter.sessionId);
      if (filter.status !== undefined) query = query.where('status', '=', filter.status);
      if (filter.after) {
        const { createdAtUs, id } = filter.after;
        query = query.where(
          sql<boolean>`(created_at, id) < (timestamptz 'epoch' + ${createdAtUs}::bigint * interval '1 microsecond', ${id}::uuid)`,
        );
      }
      return query
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .limit(filter.limit)
        .execute();
    },

    /**
     * Takes the lease of a workflow that still needs a runner: when nobody
     * holds it, when it expired, or when `owner` holds it already. Expiry is
     * computed with the database's clock, the one every replica shares.
     * Returns the row when the lease is ours.
     */
    async claimLease(input: {
      tenantId: string;
      id: string;
      owner: string;
      leaseMs: number;
    }): Promise<WorkflowRow | undefined> {
      const claimed = await sql<WorkflowRow>`
        UPDATE workflows
        SET lease_owner = ${input.owner},
            lease_expires_at = now() + ${input.leaseMs}::double precision * interval '1 millisecond'
        WHERE id = ${input.id} AND tenant_id = ${input.tenantId}
          AND status = ANY(${LEASABLE}::text[])
          AND (lease_owner IS NULL OR lease_owner = ${input.owner} OR lease_expires_at < now())
        RETURNING *`.execute(db);
      return claimed.rows[0];
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
          lease_expires_at: sql<Date>`now() + ${input.leaseMs}::double precision * interval '1 millisecond'`,
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

    /** Adds a model call's usage to the workflow's totals (an increment: concurrent adders never lose one). */
    async addUsage(tenantId: string, id: string, usage: UsageIncrement): Promise<void> {
      await db
        .updateTable('workflows')
        .set({
          input_tokens: sql<string>`input_tokens + ${usage.inputTokens}`,
          output_tokens: sql<string>`output_tokens + ${usage.outputTokens}`,
          cached_input_tokens: sql<string>`cached_input_tokens + ${usage.cachedInputTokens}`,
          cost_usd: sql<string>`cost_usd + ${usage.costUsd}`,
        })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .execute();
    },
  };
}

export type WorkflowsRepository = ReturnType<typeof workflowsRepository>;
