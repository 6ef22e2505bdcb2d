import { type RawBuilder, sql } from 'kysely';
import { WITHOUT_FLUSH_WAIT } from '../store/database.js';
import {
  type EncodedEvents,
  EVENTS_CHANNEL,
  eventsAfterFrom,
  turnRowsJson,
  turnsWrittenFrom,
  usageWrittenFrom,
} from '../store/event-statement-parts.js';
import { type Slots, statementsByShape } from '../store/fixed-statement.js';
import {
  endedAttemptError,
  failStartedAttemptsAfterTransition,
} from '../store/pipeline-transition-writes.js';
import type { WorkflowRow } from '../store/schema.js';
import { type TenantEndpointsJson, tenantEndpointColumns } from '../store/tenant-endpoints.js';
import { leaseExpiry } from '../store/workflow-leases.js';
import { statusesBefore, type transitionEffects } from './state-machine.js';
import type { TransitionInput } from './transitions.js';
import type { AwaitingReason, WorkflowKind, WorkflowStatus } from './types.js';

/**
 * The statement of a transition (transitions.ts: compareAndSet): one
 * UPDATE of the workflow row whose WHERE clause holds the checks, with its
 * turns, its events and its NOTIFY as CTEs selecting from it. Its text
 * depends on the transition's shape only, and is compiled once per shape.
 */

/**
 * What the text of a transition's statement depends on: which columns it
 * sets and how, which checks and writes it makes, whether it reads the
 * tenant's tools and waits for the WAL flush. The rest are its values.
 */
export interface TransitionShape {
  /** Sets `paused_at` to the transition's time; every other transition sets it NULL. */
  pauses: boolean;
  starts: boolean;
  finishes: boolean;
  /** The lease taken for a run starting on this replica, cleared, or left as it is. */
  lease: 'take' | 'clear' | 'keep';
  kind: boolean;
  result: boolean;
  error: boolean;
  expectedVersion: boolean;
  fromAwaiting: boolean;
  turns: boolean;
  /** Writes usage ledger rows (TransitionInput's `usageRows`). */
  usage: boolean;
  /** A `failed` or `cancelled` end: the stage attempts still running fail with it. */
  endsAttempts: boolean;
  tokens: boolean;
  durable: boolean;
  /** Returns the row's seq alone (`returning: 'seq'`), not the whole row. */
  seqOnly: boolean;
  /** Made by a run: only while it holds the lease (TransitionInput's `heldBy`). */
  held: boolean;
}

export interface TransitionValues extends Record<string, unknown> {
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
  heldBy: string | undefined;
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
  /** The usage ledger rows, as JSON */
  usage: string | undefined;
  /** endedAttemptError's, as JSON */
  attemptsError: string | undefined;
  /** encodeEvents' JSON, with their count (their time is `now`) */
  events: string;
  eventCount: number;
  channel: string;
  origin: string;
  tokensText: string | undefined;
  tokensAfter: number | undefined;
}

export type Effects = ReturnType<typeof transitionEffects>;

export function shapeOf(input: TransitionInput, effects: Effects): TransitionShape {
  return {
    pauses: effects.pauses,
    starts: effects.starts,
    finishes: effects.finishes,
    lease: input.lease ? 'take' : effects.clearsLease ? 'clear' : 'keep',
    kind: input.kind !== undefined,
    result: input.result !== undefined,
    error: input.error !== undefined,
    expectedVersion: input.expectedVersion !== undefined,
    fromAwaiting: input.fromAwaiting !== undefined,
    turns: (input.turnRows?.length ?? 0) > 0,
    usage: (input.usageRows?.length ?? 0) > 0,
    endsAttempts: input.to === 'failed' || input.to === 'cancelled',
    tokens: input.tokens !== undefined,
    durable: input.durable !== false,
    seqOnly: input.returning === 'seq',
    held: heldBy(input) !== undefined,
  };
}

/** The lease a transition requires: a run's, unless the transition takes the lease itself. */
export function heldBy(input: TransitionInput): string | undefined {
  return input.lease ? undefined : input.heldBy;
}

export function valuesOf(
  input: TransitionInput,
  effects: Effects,
  encoded: EncodedEvents,
): TransitionValues {
  return {
    to: input.to,
    awaitingReason: effects.awaitingReason,
    now: encoded.ts.toISOString(),
    leaseOwner: input.lease?.owner,
    leaseMs: input.lease?.leaseMs,
    heldBy: heldBy(input),
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
    usage: input.usageRows?.length ? JSON.stringify(input.usageRows) : undefined,
    attemptsError:
      input.to === 'failed' || input.to === 'cancelled'
        ? JSON.stringify(endedAttemptError(input.to))
        : undefined,
    events: encoded.json,
    eventCount: encoded.count,
    channel: EVENTS_CHANNEL,
    origin: input.origin,
    tokensText: input.tokens?.text,
    tokensAfter: input.tokens?.afterEvents,
  };
}

export type TransitionRow = WorkflowRow & Partial<TenantEndpointsJson>;

/**
 * A transition's statement of each shape, compiled once: building and
 * compiling it with kysely took ~40 µs of the service thread at each
 * transition, two of them on a simple workflow's critical path.
 */
export const transitionStatements = statementsByShape<
  TransitionShape,
  TransitionValues,
  TransitionRow
>({
  key: (shape) =>
    [
      shape.pauses,
      shape.starts,
      shape.finishes,
      shape.lease,
      shape.kind,
      shape.result,
      shape.error,
      shape.expectedVersion,
      shape.fromAwaiting,
      shape.turns,
      shape.usage,
      shape.endsAttempts,
      shape.tokens,
      shape.durable,
      shape.seqOnly,
      shape.held,
    ].join(),
  build: (shape, v) => transitionStatement(shape, v),
});

/** The statement of a transition of `shape`, its values read from `v`, with a review's own writes (`extra`). */
export function transitionStatement(
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
        paused_at = ${shape.pauses ? sql`${v.now}` : sql`NULL`},
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
        ${shape.held ? sql`AND lease_owner = ${v.heldBy}` : sql``}
      RETURNING ${shape.seqOnly ? sql`id, tenant_id, last_seq` : sql`*`}
    ), ${sql.join(
      [
        ...(shape.turns ? [turnsWrittenFrom('changed', v.turns)] : []),
        ...(shape.usage ? [usageWrittenFrom('changed', v.usage)] : []),
        ...(extra?.alsoInStatement ?? []),
        ...(shape.endsAttempts ? [failStartedAttemptsAfterTransition(v.attemptsError)] : []),
        eventsAfterFrom('changed', {
          json: v.events,
          count: eventCount,
          ts: v.now,
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
