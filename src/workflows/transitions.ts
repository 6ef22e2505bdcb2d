import { type RawBuilder, sql, type Transaction } from 'kysely';
import { conflict, notFound } from '../errors.js';
import { type Db, type DbOrTx, inTransaction } from '../store/database.js';
import { encodeEvents } from '../store/event-statement-parts.js';
import { parametersOf } from '../store/fixed-statement.js';
import type { Database, NewLlmCallRow, WorkflowRow } from '../store/schema.js';
import { endpointsOf, type TenantEndpoints } from '../store/tenant-endpoints.js';
import {
  type NewEventRow,
  type TokensAmongEvents,
  type TurnRow,
  USAGE_EVENT_TYPES,
  workflowEventsRepository,
} from '../store/workflow-events.js';
import { LeaseLostError } from '../store/workflow-leases.js';
import type { UsageIncrement } from '../store/workflows.js';
import { toEvent, toWorkflow } from './rows.js';
import { assertTransition, transitionEffects } from './state-machine.js';
import {
  createTransitionBatches,
  isBatchable,
  type TransitionBatches,
} from './transition-batches.js';
import {
  heldBy,
  shapeOf,
  transitionStatement,
  transitionStatements,
  valuesOf,
} from './transition-statement.js';
import {
  type AwaitingReason,
  addWorkflowUsage,
  type Workflow,
  type WorkflowError,
  type WorkflowEvent,
  type WorkflowKind,
  type WorkflowResult,
  type WorkflowStatus,
  type WorkflowUsage,
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
  /** The usage ledger's rows of the workflow's calls, written in the transition's statement. */
  usageRows?: NewLlmCallRow[];
  /**
   * Events read under the row lock once the checks passed, written before
   * `events` (the `failed` ends of the calls a cancel leaves open): what
   * the workflow's runs wrote before is committed then, and nothing they
   * write after is accepted.
   */
  eventsUnderLock?: (tx: Transaction<Database>) => Promise<NewEventRow[]>;
  /**
   * A row another transaction holds (an answer, a review, another
   * replica's sweep) is not waited for: the transition throws
   * `WorkflowLocked` (an expiry sweep's, which leaves it to its holder).
   * Takes the locked path.
   */
  skipLocked?: boolean;
  /**
   * The lease owner of the run that makes the transition (Run's `lease`):
   * made only while the workflow's row still names it, else refused with
   * `LeaseLostError`. A run stalled past its lease (a frozen process, a
   * blocked event loop) whose workflow was taken over since, by another
   * replica or by a new run on its own, must not write over that one's
   * work. Ignored by a transition that takes the lease.
   */
  heldBy?: string;
  /**
   * Counts what the workflow's model calls spent since its last `usage`
   * event (store/workflow-events.ts `uncountedUsage`, read under the row
   * lock, and the calls among this transition's own events), adding it to
   * the totals with a `usage` event before `workflow_end`: an end made
   * from outside its runs (a cancel, a failure) that no run's end counted.
   */
  countUncountedUsage?: boolean;
  /**
   * Writes made in the transition's own statement: data-modifying CTEs that
   * select `FROM changed` (the workflow row as updated), so they happen if
   * and only if the transition does (a review's stage-attempt rows, a
   * completed workflow's messages in its session).
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
  /**
   * What the caller needs back: the workflow as changed (an API action
   * answers with it), or its events alone (`seq`: a run's own transitions,
   * whose statement then returns the row's seq rather than every column of
   * it: parsing the row took ~40 µs of the service thread at each of a
   * simple workflow's two transitions).
   */
  returning?: Returning;
}

export type Returning = 'workflow' | 'seq';

/** A transition whose caller gets the workflow back (the default). */
export type WorkflowTransitionInput = TransitionInput & { returning?: 'workflow' };

export interface TransitionResult {
  workflow: Workflow;
  events: WorkflowEvent[];
  /** The tenant's HTTP tools and MCP servers, when the input asked (`lease`: a run starts here). */
  endpoints?: TenantEndpoints;
  /** The `alsoSelect` columns, by name without `also_`. */
  also: Record<string, unknown>;
}

/** A transition's result without the workflow (`returning: 'seq'`). */
export type SeqTransitionResult = Omit<TransitionResult, 'workflow'>;

/** What a transition returning `R` resolves to. */
export type TransitionResultOf<R extends Returning> = R extends 'seq'
  ? SeqTransitionResult
  : TransitionResult;

/**
 * The one way a workflow changes status: a compare-and-set that checks the
 * state machine, the pause reason and the version, updates the row
 * (`version + 1`), writes the action's rows (`alsoInStatement`), appends
 * the transition's events and notifies the other replicas, all in one
 * statement; an end as `failed` or `cancelled` also fails the stage
 * attempts still running. Two concurrent transitions on one workflow queue
 * on the row lock; the second re-checks against the first's result and is
 * refused if it no longer applies, so two `continue`s never both succeed. A
 * refusal, events read under the lock (`eventsUnderLock`), usage counted
 * under it (`countUncountedUsage`) or a lock not waited for (`skipLocked`)
 * take the locked path: lock, check
 * (throwing the 404 or 409 that says why), read, then the same
 * compare-and-set. With `batches`, a transition that can share its
 * statement goes in a batch (transition-batches.ts).
 */
export async function transitionWorkflow(
  db: Db,
  input: TransitionInput & { returning: 'seq' },
  batches?: TransitionBatches,
): Promise<SeqTransitionResult>;
export async function transitionWorkflow(
  db: Db,
  input: WorkflowTransitionInput,
  batches?: TransitionBatches,
): Promise<TransitionResult>;
export async function transitionWorkflow(
  db: Db,
  input: TransitionInput,
  batches?: TransitionBatches,
): Promise<TransitionResult | SeqTransitionResult>;
export async function transitionWorkflow(
  db: Db,
  input: TransitionInput,
  batches?: TransitionBatches,
): Promise<TransitionResult | SeqTransitionResult> {
  if (!input.eventsUnderLock && !input.countUncountedUsage && !input.skipLocked) {
    const done =
      batches && isBatchable(input) ? await batches.run(input) : await compareAndSet(db, input);
    if (done) return done;
    // Refused: the locked path below says why (or, if the workflow changed
    // back meanwhile, makes the transition after all).
  }
  return inTransaction(db, async (tx) => {
    const locked = await sql<WorkflowRow>`
      SELECT * FROM workflows WHERE id = ${input.workflowId} AND tenant_id = ${input.tenantId}
      FOR UPDATE ${input.skipLocked ? sql`SKIP LOCKED` : sql``}`.execute(tx);
    const row = locked.rows[0];
    if (!row && input.skipLocked) throw new WorkflowLocked(input.workflowId);
    if (!row) throw notFound('Workflow');
    const current = toWorkflow(row);
    if (input.fromAwaiting) assertAwaiting(current, input.fromAwaiting);
    assertTransition(current.status, input.to);
    if (input.expectedVersion !== undefined) assertVersion(current, input.expectedVersion);
    const owner = heldBy(input);
    if (owner !== undefined && row.lease_owner !== owner)
      throw new LeaseLostError(input.workflowId);
    const found = (await input.eventsUnderLock?.(tx)) ?? [];
    const withFound = withEventsFirst(input, found);
    // Under the lock with the checks passed, the compare-and-set cannot be refused.
    const done = await compareAndSet(
      tx,
      input.countUncountedUsage ? await withUncountedUsage(tx, withFound) : withFound,
    );
    if (!done)
      throw new Error(`the transition of workflow ${input.workflowId} was refused under its lock`);
    return done;
  });
}

/** A transition with `skipLocked` found its workflow's row held by another transaction (or gone). */
export class WorkflowLocked extends Error {
  override name = 'WorkflowLocked';
  constructor(workflowId: string) {
    super(`workflow ${workflowId} is locked by another transaction, or gone`);
  }
}

/** 409 `stale_version` unless the workflow is at the version the client saw. */
export function assertVersion(current: Workflow, expectedVersion: number): void {
  if (expectedVersion === current.version) return;
  throw conflict(
    'stale_version',
    `The workflow changed since version ${expectedVersion}; it is at version ${current.version}`,
    currentState(current),
  );
}

/**
 * `input` (its events final but its `workflow_end`) counting what the
 * workflow's model calls spent since its last `usage` event: the stored
 * ones and its own, with a `usage` event before its last event.
 */
async function withUncountedUsage(
  tx: Transaction<Database>,
  input: TransitionInput,
): Promise<TransitionInput> {
  const stored = await workflowEventsRepository(tx).uncountedUsage(input);
  const counted = [...input.events.map(usageOfCall), input.usage].reduce<WorkflowUsage>(
    (sum, usage) => (usage ? addWorkflowUsage(sum, usage) : sum),
    stored,
  );
  if (counted.inputTokens + counted.outputTokens === 0 && counted.costUsd === 0) return input;
  const usage: NewEventRow = {
    type: 'usage',
    step: null,
    status: 'info',
    detail: { ...counted },
    elapsedMs: null,
  };
  return {
    ...input,
    usage: counted,
    events: [...input.events.slice(0, -1), usage, ...input.events.slice(-1)],
  };
}

/** A model call's usage as its event carries it (orchestrator/collect-text.ts `usageDetail`). */
function usageOfCall(event: NewEventRow): UsageIncrement | undefined {
  if (!USAGE_EVENT_TYPES.includes(event.type)) return undefined;
  const usage = (event.detail as { usage?: Partial<UsageIncrement> }).usage;
  if (!usage) return undefined;
  return {
    inputTokens: usage.inputTokens ?? 0,
    outputTokens: usage.outputTokens ?? 0,
    cachedInputTokens: usage.cachedInputTokens ?? 0,
    costUsd: usage.costUsd ?? 0,
  };
}

/** `input` with `events` before its own; tokens among them keep their place after the same events. */
function withEventsFirst(input: TransitionInput, events: NewEventRow[]): TransitionInput {
  if (events.length === 0) return input;
  return {
    ...input,
    events: [...events, ...input.events],
    ...(input.tokens
      ? { tokens: { ...input.tokens, afterEvents: input.tokens.afterEvents + events.length } }
      : {}),
  };
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
): Promise<TransitionResult | SeqTransitionResult | undefined> {
  const now = new Date();
  const effects = transitionEffects(input.to, input.awaitingReason);
  const encoded = encodeEvents(input.events, now);
  const shape = shapeOf(input, effects);
  const values = valuesOf(input, effects, encoded);
  // A review's own writes carry their values in their SQL: built at each run.
  const answered =
    input.alsoInStatement?.length || input.alsoSelect?.length
      ? await transitionStatement(shape, parametersOf(values), input).execute(db)
      : await transitionStatements(db, shape, values);
  const row = answered.rows[0];
  if (!row) return undefined;
  const { tenant_http_tools: httpTools, tenant_mcp_servers: mcpServers, ...columns } = row;
  // The workflow's columns (or its seq alone), with the `alsoSelect` ones taken out.
  const workflowRow: WorkflowRow & Record<string, unknown> = { ...columns };
  const also: Record<string, unknown> = {};
  for (const name of Object.keys(workflowRow)) {
    if (!name.startsWith(ALSO_PREFIX)) continue;
    also[name.slice(ALSO_PREFIX.length)] = workflowRow[name];
    delete workflowRow[name];
  }
  const result: SeqTransitionResult = {
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
  return shape.seqOnly ? result : { ...result, workflow: toWorkflow(workflowRow) };
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
