import { sql } from 'kysely';
import { type AppError, conflict } from '../errors.js';
import type { DbOrTx } from './database.js';
import type { WorkflowKey } from './pipelines.js';
import { LeaseLostError } from './workflow-leases.js';

/**
 * The lease condition of a run's writes besides its events and transitions
 * (whose statements check `heldBy` themselves): its plan and stage attempts
 * (pipelines.ts), written from the workflow row only while the run holds
 * the workflow's lease.
 */

/** The lease owner of the run that writes (Run's `lease`): only while it holds the workflow's lease. */
export interface HeldBy {
  heldBy: string;
}

/**
 * `held`: the workflow row a run's write selects from, only while `heldBy`
 * holds its lease. Share-locked, so the write and a takeover
 * (the sweep's claim, a review's transition, both row-locking updates)
 * never overlap: a takeover that commits first leaves the write no row
 * (READ COMMITTED re-reads the locked row's new version), and one that
 * comes after waits for the write to commit, the sweep skipping the row
 * until then. Unlocked, the write could read the old owner while a
 * takeover commits, and land after the new run had read the rows.
 * `unfinished`: only while the workflow has not ended, so a cancel that
 * commits first leaves the write no row either (an attempt's start).
 */
export function heldWorkflow(key: WorkflowKey & HeldBy, options: { unfinished?: boolean } = {}) {
  return sql`held AS (
    SELECT id, tenant_id FROM workflows
    WHERE id = ${key.workflowId} AND tenant_id = ${key.tenantId}
      ${options.unfinished ? sql`AND status NOT IN ('completed', 'failed', 'cancelled')` : sql``}
      AND lease_owner = ${key.heldBy}
    FOR SHARE
  )`;
}

/**
 * Why a write found no workflow row to write from: 409 `workflow_finished`
 * when the workflow ended (a cancel), LeaseLostError when `heldBy` no longer
 * holds its lease; undefined otherwise (no such workflow, or no lease asked:
 * an event append may be made outside a run).
 */
export async function refusalOf(
  db: DbOrTx,
  key: WorkflowKey & Partial<HeldBy>,
): Promise<AppError | LeaseLostError | undefined> {
  const workflow = await db
    .selectFrom('workflows')
    .select(['status', 'finished_at', 'lease_owner'])
    .where('id', '=', key.workflowId)
    .where('tenant_id', '=', key.tenantId)
    .executeTakeFirst();
  if (!workflow) return undefined;
  // Set exactly when the status is a finished one (a CHECK constraint).
  if (workflow.finished_at) {
    return conflict('workflow_finished', `The workflow is already ${workflow.status}`);
  }
  if (key.heldBy !== undefined && workflow.lease_owner !== key.heldBy) {
    return new LeaseLostError(key.workflowId);
  }
  return undefined;
}
