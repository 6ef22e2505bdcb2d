import { type RawBuilder, sql, type Transaction } from 'kysely';
import { conflict, notFound } from '../errors.js';
import { type Db, type DbOrTx, WITHOUT_FLUSH_WAIT } from '../store/database.js';
import { failStartedAttemptsAfterTransition } from '../store/pipeline-transition-writes.js';
import type { Database, WorkflowRow } from '../store/schema.js';
import {
  endpointsOf,
  type TenantEndpoints,
  type TenantEndpointsJson,
  tenantEndpointColumns,
} from '../store/tenant-endpoints.js';
import {
  encodeEvents,
  eventsAfter,
  type NewEventRow,
  type TokensAmongEvents,
  type TurnRow,
  turnsWritten,
} from '../store/workflow-events.js';
import { leaseExpiry, type UsageIncrement } from '../store/workflows.js';
import { toEvent, toWorkflow } from './rows.js';
import { assertTransition, statusesBefore, transitionEffects } from './state-machine.js';
import {
  createTransitionBatches,
  isBatchable,
  type TransitionBatches,
} from './transition-batches.js';
import type {
  AwaitingReason,
  Workflow,
  WorkflowError,
  WorkflowEvent,
  WorkflowKind,
  WorkflowResult,
  WorkflowStatus,
} from './types.js';

export interface TransitionInput {
  tenantId: string;
  workflowId: string;
  to: WorkflowStatus;
  awaitingReason?: AwaitingReason;
  /** The version the client saw; a different current version is a 409. */
  expectedVersion?: number;
  /**
   * The pauses this transition resumes (an answer resumes a clarification);
   * checked under the row lock, so a check and its write cannot be split
   * by another transition. Any other status or reason is a 409.
   */
  fromAwaiting?: readonly AwaitingReason[];
  kind?: WorkflowKind;
  result?: WorkflowResult;
  /** Added to the workflow's usage totals with the status change (a run's usage at its end or pause). */
  usage?: UsageIncrement;
  error?: WorkflowError;
  /** Events appended in the same transaction. */
  events: NewEventRow[];
  /** Tool-loop turns written in the transition's statement (see TurnRow). */
  turnRows?: TurnRow[];
  /**
   * More writes that commit or roll back with the transition, made once it
   * has passed its checks (a completed workflow's messages in its session).
   */
  alsoInTransaction?: (tx: Transaction<Database>) => Promise<void>;
  /**
   * Writes made in the transition's own statement: data-modifying CTEs that
   * select `FROM changed` (the workflow row as updated), so they happen if
   * and only if the transition does (a review's stage-attempt rows).
   */
  alsoInStatement?: RawBuilder<unknown>[];
  /**
   * More columns of the statement's result, each `expression AS also_<name>`,
   * reading what the `alsoInStatement` CTEs wrote (a review's rows, which
   * the run it launches then need not read again); returned in `also`.
   */
  alsoSelect?: RawBuilder<unknown>[];
  /**
   * False: commit without waiting for the WAL flush (see WITHOUT_FLUSH_WAIT),
   * for a transition a PostgreSQL crash may undo at no cost (a run's start:
   * the workflow is queued again). Durable unless said.
   */
  durable?: boolean;
  /** Replica id, carried in the NOTIFY so the origin can skip its own echo. */
  origin: string;
  /** Token text streamed among the events (see eventsAfter). */
  tokens?: TokensAmongEvents;
  /**
   * Back to `running` on the replica that makes the transition (a user's
   * answer or review): it takes the lease with it, and its run needs no
   * claim of its own.
   */
  lease?: { owner: string; leaseMs: number };
}

export interface TransitionResult {
  workflow: Workflow;
  events: WorkflowEvent[];
  /** The tenant's HTTP tools and MCP servers, when the input asked (`lease`: a run starts here). */
  endpoints?: TenantEndpoints;
  /** The `alsoSelect` columns, by name without `also_`. */
  also: Record<string, unknown>;
}

/**
 * The one way a workflow changes status: a compare-and-set that checks the
 * state machine, the pause reason and the version, updates the row
 * (`version + 1`), writes the action's rows (`alsoInStatement`), appends
 * the transition's events and notifies the other replicas, all in one
 * statement; an end as `failed` or `cancelled` also fails the stage
 * attempts still running. Two concurrent transitions on one workflow queue
 * on the row lock; the second re-checks against the first's result and is
 * refused if it no longer applies, so two `continue`s never both succeed. A
 * refusal, or writes that need their own statements (`alsoInTransaction`),
 * take the locked path: lock, check (throwing the 404 or 409 that says
 * why), write, then the same compare-and-set. With `batches`, a transition
 * that can share its statement goes in a batch (transition-batches.ts).
 */
export async function transitionWorkflow(
  db: Db,
  input: TransitionInput,
  batches?: TransitionBatches,
): Promise<TransitionResult> {
  if (!input.alsoInTransaction) {
    const done =
      batches && isBatchable(input) ? await batches.run(input) : await compareAndSet(db, input);
    if (done) return done;
    // Refused: the locked path below says why (or, if the workflow changed
    // back meanwhile, makes the transition after all).
  }
  return db.transaction().execute(async (tx) => {
    const locked = await sql<WorkflowRow>`
      SELECT * FROM workflows WHERE id = ${input.workflowId} AND tenant_id = ${input.tenantId} FOR UPDATE`.execute(
      tx,
    );
    const row = locked.rows[0];
    if (!row) throw notFound('Workflow');
    const current = toWorkflow(row);
    if (input.fromAwaiting) assertAwaiting(current, input.fromAwaiting);
    assertTransition(current.status, input.to);
    if (input.expectedVersion !== undefined && input.expectedVersion !== current.version) {
      throw conflict(
        'stale_version',
        `The workflow changed since version ${input.expectedVersion}; it is at version ${current.version}`,
        currentState(current),
      );
    }
    await input.alsoInTransaction?.(tx);
    // Under the lock with the checks passed, the compare-and-set cannot be refused.
    const done = await compareAndSet(tx, input);
    if (!done)
      throw new Error(`the transition of workflow ${input.workflowId} was refused under its lock`);
    return done;
  });
}

/**
 * The transition as one statement, for the common case with no other
 * writes: the checks (state machine, pause reason, version) are the UPDATE's
 * WHERE clause, and the events are appended and notified in the same
 * statement. One round trip instead of five (BEGIN, lock, update, append,
 * COMMIT), with the same guarantees: the UPDATE takes the row lock, so
 * concurrent transitions still queue, and a second one re-evaluates the
 * WHERE clause against the first one's result (READ COMMITTED) and is
 * refused. Undefined when refused: the caller finds out why.
 */
async function compareAndSet(
  db: DbOrTx,
  input: TransitionInput,
): Promise<TransitionResult | undefined> {
  const now = new Date();
  const effects = transitionEffects(input.to, input.awaitingReason);
  const from = statusesBefore(input.to);
  // A transition that leases the workflow to this replica launches its run
  // here: the run's tools are read in the same statement.
  const endpoints = input.lease ? tenantEndpointColumns(input.tenantId) : undefined;
  const encoded = encodeEvents(input.events, now);
  const result = await sql<WorkflowRow & Partial<TenantEndpointsJson>>`
    WITH changed AS (
      UPDATE workflows SET
        status = ${input.to},
        awaiting_reason = ${effects.awaitingReason},
        version = version + 1,
        updated_at = ${now},
        started_at = ${effects.starts ? sql`coalesce(started_at, ${now})` : sql`started_at`},
        finished_at = ${effects.finishes ? sql`${now}` : sql`finished_at`},
        lease_owner = ${input.lease ? sql`${input.lease.owner}` : effects.clearsLease ? sql`NULL` : sql`lease_owner`},
        lease_expires_at = ${input.lease ? leaseExpiry(input.lease.leaseMs) : effects.clearsLease ? sql`NULL` : sql`lease_expires_at`},
        kind = ${input.kind ? sql`${input.kind}` : sql`kind`},
        result = ${input.result ? sql`${JSON.stringify(input.result)}::jsonb` : sql`result`},
        error = ${input.error ? sql`${JSON.stringify(input.error)}::jsonb` : sql`error`},
        input_tokens = input_tokens + ${input.usage?.inputTokens ?? 0},
        output_tokens = output_tokens + ${input.usage?.outputTokens ?? 0},
        cached_input_tokens = cached_input_tokens + ${input.usage?.cachedInputTokens ?? 0},
        cost_usd = cost_usd + ${input.usage?.costUsd ?? 0},
        last_seq = last_seq + ${input.events.length}
      WHERE id = ${input.workflowId} AND tenant_id = ${input.tenantId}
        AND status = ANY(${from}::text[])
        ${input.expectedVersion === undefined ? sql`` : sql`AND version = ${input.expectedVersion}`}
        ${input.fromAwaiting ? sql`AND awaiting_reason = ANY(${[...input.fromAwaiting]}::text[])` : sql``}
      RETURNING *
    ), ${sql.join(
      [
        ...turnsWritten(input.turnRows ?? [], 'changed'),
        ...(input.alsoInStatement ?? []),
        ...(input.to === 'failed' || input.to === 'cancelled'
          ? [failStartedAttemptsAfterTransition(input.to)]
          : []),
        eventsAfter('changed', { ...input, encoded }),
      ],
      sql`, `,
    )}
    SELECT changed.*
      ${
        endpoints
          ? sql`, ${endpoints.tenant_http_tools} AS tenant_http_tools,
              ${endpoints.tenant_mcp_servers} AS tenant_mcp_servers`
          : sql``
      }
      ${input.alsoSelect?.length ? sql`, ${sql.join(input.alsoSelect, sql`, `)}` : sql``}
    FROM changed, notified${input.durable === false ? sql`, ${WITHOUT_FLUSH_WAIT}` : sql``}`.execute(
    db,
  );
  const row = result.rows[0];
  if (!row) return undefined;
  const { tenant_http_tools: httpTools, tenant_mcp_servers: mcpServers, ...columns } = row;
  // The workflow's columns, with the `alsoSelect` ones taken out.
  const workflowRow: WorkflowRow & Record<string, unknown> = { ...columns };
  const also: Record<string, unknown> = {};
  for (const name of Object.keys(workflowRow)) {
    if (!name.startsWith(ALSO_PREFIX)) continue;
    also[name.slice(ALSO_PREFIX.length)] = workflowRow[name];
    delete workflowRow[name];
  }
  return {
    workflow: toWorkflow(workflowRow),
    also,
    events: encoded
      .rows({ workflowId: input.workflowId, tenantId: input.tenantId, lastSeq: row.last_seq })
      .map(toEvent),
    ...(httpTools && mcpServers
      ? {
          endpoints: endpointsOf({ tenant_http_tools: httpTools, tenant_mcp_servers: mcpServers }),
        }
      : {}),
  };
}

/**
 * This replica's transition batches (transition-batches.ts), which make a
 * transition that goes alone as compareAndSet.
 */
export function createReplicaTransitionBatches(
  db: Db,
  limits: { maxInFlight: number; maxItems: number; maxChars: number },
): TransitionBatches {
  return createTransitionBatches({ ...limits, db, alone: (input) => compareAndSet(db, input) });
}

/** The prefix of the `alsoSelect` columns' names. */
const ALSO_PREFIX = 'also_';

/** 409 `not_awaiting_input` unless the workflow waits for one of `reasons`; the message says what it is instead. */
export function assertAwaiting(workflow: Workflow, reasons: readonly AwaitingReason[]): void {
  if (
    workflow.status === 'awaiting_input' &&
    workflow.awaitingReason !== null &&
    reasons.includes(workflow.awaitingReason)
  ) {
    return;
  }
  const now =
    workflow.status === 'awaiting_input'
      ? `awaiting input (${workflow.awaitingReason})`
      : workflow.status;
  throw conflict(
    'not_awaiting_input',
    `The workflow is ${now}, not awaiting ${reasons.join(' or ')}; it is at version ${workflow.version}`,
    currentState(workflow),
  );
}

/** What a 409 tells the client about the workflow it acted on. */
function currentState(workflow: Workflow): Record<string, unknown> {
  return {
    status: workflow.status,
    awaitingReason: workflow.awaitingReason,
    version: workflow.version,
  };
}
