import { type RawBuilder, sql, type Transaction } from 'kysely';
import { conflict, notFound } from '../errors.js';
import { type Db, type DbOrTx, WITHOUT_FLUSH_WAIT } from '../store/database.js';
import { parametersOf, type Slots, statementsByShape } from '../store/fixed-statement.js';
import {
  endedAttemptError,
  failStartedAttemptsAfterTransition,
} from '../store/pipeline-transition-writes.js';
import type { Database, WorkflowRow } from '../store/schema.js';
import {
  endpointsOf,
  type TenantEndpoints,
  type TenantEndpointsJson,
  tenantEndpointColumns,
} from '../store/tenant-endpoints.js';
import {
  type EncodedEvents,
  EVENTS_CHANNEL,
  encodeEvents,
  eventsAfterFrom,
  type NewEventRow,
  type TokensAmongEvents,
  type TurnRow,
  turnRowsJson,
  turnsWrittenFrom,
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
 * refusal, or writes that need their own statements (`alsoInTransaction`),
 * take the locked path: lock, check (throwing the 404 or 409 that says
 * why), write, then the same compare-and-set. With `batches`, a transition
 * that can share its statement goes in a batch (transition-batches.ts).
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
): Promise<TransitionResult | SeqTransitionResult | undefined> {
  const now = new Date();
  const effects = transitionEffects(input.to, input.awaitingReason);
  const encoded = encodeEvents(input.events, now);
  const shape = shapeOf(input, effects);
  const values = valuesOf(input, effects, encoded, now);
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
 * What the text of a transition's statement depends on: which columns it
 * sets and how, which checks and writes it makes, whether it reads the
 * tenant's tools and waits for the WAL flush. The rest are its values.
 */
interface TransitionShape {
  starts: boolean;
  finishes: boolean;
  /** The lease taken by this replica (a run starts here), cleared, or left as it is. */
  lease: 'take' | 'clear' | 'keep';
  kind: boolean;
  result: boolean;
  error: boolean;
  expectedVersion: boolean;
  fromAwaiting: boolean;
  turns: boolean;
  /** A `failed` or `cancelled` end: the stage attempts still running fail with it. */
  endsAttempts: boolean;
  tokens: boolean;
  durable: boolean;
  /** Returns the row's seq alone (`returning: 'seq'`), not the whole row. */
  seqOnly: boolean;
}

interface TransitionValues extends Record<string, unknown> {
  to: WorkflowStatus;
  awaitingReason: AwaitingReason | null;
  /**
   * The transition's time as ISO 8601 text, read as a timestamptz: what
   * node-postgres would make of a Date, at a fraction of the cost (it
   * formats each Date parameter with the local time zone's offset, ~3 µs,
   * four times a transition).
   */
  now: string;
  leaseOwner: string | undefined;
  leaseMs: number | undefined;
  kind: WorkflowKind | undefined;
  /** JSON */
  result: string | undefined;
  /** JSON */
  error: string | undefined;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costUsd: number;
  workflowId: string;
  tenantId: string;
  from: WorkflowStatus[];
  expectedVersion: number | undefined;
  fromAwaiting: AwaitingReason[] | undefined;
  /** turnRowsJson's text */
  turns: string | undefined;
  /** endedAttemptError's JSON */
  attemptsError: string | undefined;
  /** encodeEvents' JSON, with their count and time */
  events: string;
  eventCount: number;
  ts: string;
  channel: string;
  origin: string;
  tokensText: string | undefined;
  tokensAfter: number | undefined;
}

type Effects = ReturnType<typeof transitionEffects>;

function shapeOf(input: TransitionInput, effects: Effects): TransitionShape {
  return {
    starts: effects.starts,
    finishes: effects.finishes,
    lease: input.lease ? 'take' : effects.clearsLease ? 'clear' : 'keep',
    kind: input.kind !== undefined,
    result: input.result !== undefined,
    error: input.error !== undefined,
    expectedVersion: input.expectedVersion !== undefined,
    fromAwaiting: input.fromAwaiting !== undefined,
    turns: (input.turnRows?.length ?? 0) > 0,
    endsAttempts: input.to === 'failed' || input.to === 'cancelled',
    tokens: input.tokens !== undefined,
    durable: input.durable !== false,
    seqOnly: input.returning === 'seq',
  };
}

function valuesOf(
  input: TransitionInput,
  effects: Effects,
  encoded: EncodedEvents,
  now: Date,
): TransitionValues {
  const at = now.toISOString();
  return {
    to: input.to,
    awaitingReason: effects.awaitingReason,
    now: at,
    leaseOwner: input.lease?.owner,
    leaseMs: input.lease?.leaseMs,
    kind: input.kind,
    result: input.result && JSON.stringify(input.result),
    error: input.error && JSON.stringify(input.error),
    inputTokens: input.usage?.inputTokens ?? 0,
    outputTokens: input.usage?.outputTokens ?? 0,
    cachedInputTokens: input.usage?.cachedInputTokens ?? 0,
    costUsd: input.usage?.costUsd ?? 0,
    workflowId: input.workflowId,
    tenantId: input.tenantId,
    from: statusesBefore(input.to),
    expectedVersion: input.expectedVersion,
    fromAwaiting: input.fromAwaiting && [...input.fromAwaiting],
    turns: input.turnRows?.length ? turnRowsJson(input.turnRows) : undefined,
    attemptsError:
      input.to === 'failed' || input.to === 'cancelled' ? endedAttemptError(input.to) : undefined,
    events: encoded.json,
    eventCount: encoded.count,
    ts: at,
    channel: EVENTS_CHANNEL,
    origin: input.origin,
    tokensText: input.tokens?.text,
    tokensAfter: input.tokens?.afterEvents,
  };
}

type TransitionRow = WorkflowRow & Partial<TenantEndpointsJson>;

/**
 * A transition's statement of each shape, compiled once: building and
 * compiling it with kysely took ~40 µs of the service thread at each
 * transition, two of them on a simple workflow's critical path.
 */
const transitionStatements = statementsByShape<TransitionShape, TransitionValues, TransitionRow>({
  key: (shape) =>
    [
      shape.starts,
      shape.finishes,
      shape.lease,
      shape.kind,
      shape.result,
      shape.error,
      shape.expectedVersion,
      shape.fromAwaiting,
      shape.turns,
      shape.endsAttempts,
      shape.tokens,
      shape.durable,
      shape.seqOnly,
    ].join(),
  build: (shape, v) => transitionStatement(shape, v),
});

/** The statement of a transition of `shape`, its values read from `v`, with a review's own writes (`extra`). */
function transitionStatement(
  shape: TransitionShape,
  v: Slots<TransitionValues>,
  extra?: Pick<TransitionInput, 'alsoInStatement' | 'alsoSelect'>,
): RawBuilder<TransitionRow> {
  const endpoints = shape.lease === 'take' ? tenantEndpointColumns(v.tenantId) : undefined;
  const eventCount = v.eventCount;
  const alsoSelect = extra?.alsoSelect ?? [];
  return sql<TransitionRow>`
    WITH changed AS (
      UPDATE workflows SET
        status = ${v.to},
        awaiting_reason = ${v.awaitingReason},
        version = version + 1,
        updated_at = ${v.now},
        started_at = ${shape.starts ? sql`coalesce(started_at, ${v.now})` : sql`started_at`},
        finished_at = ${shape.finishes ? sql`${v.now}` : sql`finished_at`},
        lease_owner = ${shape.lease === 'take' ? sql`${v.leaseOwner}` : shape.lease === 'clear' ? sql`NULL` : sql`lease_owner`},
        lease_expires_at = ${shape.lease === 'take' ? leaseExpiry(v.leaseMs) : shape.lease === 'clear' ? sql`NULL` : sql`lease_expires_at`},
        kind = ${shape.kind ? sql`${v.kind}` : sql`kind`},
        result = ${shape.result ? sql`${v.result}::jsonb` : sql`result`},
        error = ${shape.error ? sql`${v.error}::jsonb` : sql`error`},
        input_tokens = input_tokens + ${v.inputTokens},
        output_tokens = output_tokens + ${v.outputTokens},
        cached_input_tokens = cached_input_tokens + ${v.cachedInputTokens},
        cost_usd = cost_usd + ${v.costUsd},
        last_seq = last_seq + ${eventCount}
      WHERE id = ${v.workflowId} AND tenant_id = ${v.tenantId}
        AND status = ANY(${v.from}::text[])
        ${shape.expectedVersion ? sql`AND version = ${v.expectedVersion}` : sql``}
        ${shape.fromAwaiting ? sql`AND awaiting_reason = ANY(${v.fromAwaiting}::text[])` : sql``}
      RETURNING ${shape.seqOnly ? sql`id, tenant_id, last_seq` : sql`*`}
    ), ${sql.join(
      [
        ...(shape.turns ? [turnsWrittenFrom('changed', v.turns)] : []),
        ...(extra?.alsoInStatement ?? []),
        ...(shape.endsAttempts ? [failStartedAttemptsAfterTransition(v.attemptsError)] : []),
        eventsAfterFrom('changed', {
          json: v.events,
          count: eventCount,
          ts: v.ts,
          channel: v.channel,
          origin: v.origin,
          tokens: shape.tokens ? { text: v.tokensText, afterEvents: v.tokensAfter } : undefined,
        }),
      ],
      sql`, `,
    )}
    SELECT ${shape.seqOnly ? sql`changed.last_seq` : sql`changed.*`}
      ${
        endpoints
          ? sql`, ${endpoints.tenant_http_tools} AS tenant_http_tools,
              ${endpoints.tenant_mcp_servers} AS tenant_mcp_servers`
          : sql``
      }
      ${alsoSelect.length > 0 ? sql`, ${sql.join(alsoSelect, sql`, `)}` : sql``}
    FROM changed, notified${shape.durable ? sql`` : sql`, ${WITHOUT_FLUSH_WAIT}`}`;
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
