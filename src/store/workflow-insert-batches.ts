import { sql } from 'kysely';
import type { Db } from './database.js';
import { PLANNED_EACH_RUN } from './prepared-statements.js';
import { createStatementBatches, type StatementBatches } from './statement-batches.js';
import { tenantEndpointsVersion } from './tenant-endpoints.js';
import { leaseExpiry } from './workflow-leases.js';
import { type InsertedWorkflow, type NewWorkflowRow, sessionStillThere } from './workflows.js';

export type WorkflowInsertBatches = StatementBatches<NewWorkflowRow, InsertedWorkflow>;

/**
 * New workflows of one tenant inserted together (statement-batches.ts),
 * with the version of the tenant's tools read once for all of them. Each
 * is created whole or not at all, as alone. A taken Idempotency-Key fails
 * the batch's statement, whose writes are then made again alone, so only
 * its own fails, and the service replays the workflow that has the key
 * (workflows/service.ts): a rare retry costs its batch a second try,
 * where keeping keyed creates out of batches cost every one of them its
 * own statement.
 */
export function createWorkflowInsertBatches(options: {
  db: Db;
  /** How one workflow is inserted by itself (workflows.ts `insert`). */
  alone: (row: NewWorkflowRow) => Promise<InsertedWorkflow>;
  maxInFlight: number;
  maxItems: number;
  maxChars: number;
}): WorkflowInsertBatches {
  return createStatementBatches({
    maxInFlight: options.maxInFlight,
    maxItems: options.maxItems,
    maxChars: options.maxChars,
    // The question (metadata is usually small; the body limit bounds both).
    sizeOf: (row) => row.input.length,
    groupOf: (row) => row.tenantId,
    workflowOf: (row) => row.id,
    writeBatch: (rows) => insertBatch(options.db, rows),
    alone: options.alone,
  });
}

/** The rows as one statement, planned at each run for the same reason as a batch of transitions. */
async function insertBatch(db: Db, rows: NewWorkflowRow[]): Promise<InsertedWorkflow[]> {
  const tenantId = (rows[0] as NewWorkflowRow).tenantId;
  const items = JSON.stringify(
    rows.map((row) => ({
      id: row.id,
      session_id: row.sessionId,
      session_seq: row.sessionSeq,
      mode: row.mode,
      model: row.model,
      input: row.input,
      tools: row.tools,
      metadata: row.metadata,
      budget: row.budget ?? null,
      idempotency_key: row.idempotencyKey,
      request_hash: row.requestHash,
      lease_owner: row.lease?.owner ?? null,
      lease_ms: row.lease?.leaseMs ?? null,
    })),
  );
  const result = await sql<{
    inserted: { id: string; created_at: string }[];
    endpoints_version: string;
  }>`${sql.raw(PLANNED_EACH_RUN)}
    WITH inserted AS (
      INSERT INTO workflows (id, tenant_id, session_id, status, mode, model, input, tools,
        metadata, budget, idempotency_key, request_hash, lease_owner, lease_expires_at, session_seq)
      SELECT i.id, ${tenantId}, i.session_id, 'queued', i.mode, i.model, i.input, i.tools,
        i.metadata, i.budget, i.idempotency_key, i.request_hash, i.lease_owner,
        ${leaseExpiry(sql`i.lease_ms`)}, i.session_seq
      FROM jsonb_to_recordset(${items}::jsonb) AS i(id uuid, session_id text, session_seq integer, mode text,
        model text, input text, tools text[], metadata jsonb, budget jsonb,
        idempotency_key text, request_hash text, lease_owner text, lease_ms double precision)
      WHERE ${sessionStillThere(tenantId, sql`i.session_id`)}
      RETURNING id, created_at
    )
    -- One row: the version of the tenant's tools once, not once per workflow.
    SELECT (SELECT json_agg(json_build_object('id', id, 'created_at', created_at)) FROM inserted)
        AS inserted,
      ${tenantEndpointsVersion(tenantId)} AS endpoints_version,
      -- A session gone since its create read it: an error, so that nothing of the batch
      -- commits and each write is made again alone (statement-batches.ts), where only
      -- that one fails (unknown_session).
      CASE WHEN (SELECT count(*) FROM inserted) = ${rows.length}::integer THEN 0
        ELSE ('a session of the batch is gone: ' || (SELECT count(*) FROM inserted))::integer
      END AS complete`.execute(db);
  const row = result.rows[0];
  if (!row || row.inserted.length !== rows.length) {
    throw new Error(`a batch of ${rows.length} inserts wrote ${row?.inserted.length ?? 0}`);
  }
  const createdAt = new Map(row.inserted.map((one) => [one.id, new Date(one.created_at)]));
  return rows.map((one) => ({
    createdAt: createdAt.get(one.id) as Date,
    endpointsVersion: row.endpoints_version,
  }));
}
