import type { Db } from '../store/database.js';
import { workflowEventsRepository } from '../store/workflow-events.js';
import { toEvent } from './rows.js';
import type { WorkflowService } from './service.js';
import type { Workflow, WorkflowEvent } from './types.js';

/**
 * A workflow's trace (`GET /v1/workflows/:id/trace`): its event log read as
 * spans, for a timeline. Nothing is stored for it: every span is a pair of
 * events the log already holds (a start and its end), so the trace and the
 * event stream never disagree.
 *
 * - `workflow`, the root: from the workflow's creation to its
 *   `workflow_end`;
 * - `stage`: one per stage attempt (`stage` started .. completed | failed);
 * - `llm_call`: one per model call (`llm_call` started .. completed |
 *   failed), retries and fallbacks within it;
 * - `tool_call`: one per tool call, by its call id;
 * - `wait`: a pause for input (`checkpoint`, `clarification_request`,
 *   `tool_approval_request`, a stage's `paused`, `synthesis_failed`) until
 *   the `review`, `clarification_answer` or `tool_approval` that resumed
 *   it, or the `workflow_end` that ended it.
 *
 * A call or tool call made in a stage (step `<stage>/turn-<n>`) is a child
 * of the stage's attempt; everything else a child of the root. A start
 * and its end pair as a takeover pairs them (store/workflow-events.ts
 * `listOpenWork`): by type and step, and the call id or attempt number.
 *
 * Times are the events' `ts`, made non-decreasing in `seq` order (and
 * never before the workflow's creation): a write that waited for a lock,
 * or a replica whose clock is behind another's, can carry an earlier
 * reading than the event before it. `ts` is when an event was written,
 * and a call's start is often written with its end, in one statement
 * (README, Events): a span whose end measured its `elapsedMs` (model and
 * tool calls, stage attempts) starts that long before its end, unless its
 * start was written earlier still, and never before its parent. Since a
 * child starts after its parent and ends before it in `seq`, it lies
 * within its parent in time too.
 */

export const SPAN_KINDS = ['workflow', 'stage', 'llm_call', 'tool_call', 'wait'] as const;
export type SpanKind = (typeof SPAN_KINDS)[number];

export const SPAN_STATUSES = ['open', 'completed', 'failed', 'cancelled'] as const;
export type SpanStatus = (typeof SPAN_STATUSES)[number];

export interface Span {
  /** The `seq` of the event that started it; 0 for the root. */
  id: number;
  parentId: number | null;
  kind: SpanKind;
  /** The stage id, the step of a model call, the tool's name, the reason of a wait; `workflow` for the root. */
  name: string;
  step: string | null;
  status: SpanStatus;
  /** Null for the root, which its creation starts. */
  startSeq: number | null;
  endSeq: number | null;
  startedAt: Date;
  endedAt: Date | null;
  /** endedAt - startedAt; null while open. */
  durationMs: number | null;
  /** The start event's detail, then the end event's. */
  attributes: Record<string, unknown>;
}

export interface WorkflowTrace {
  workflowId: string;
  /** The last event the trace read: a client may follow the events after it. */
  lastSeq: number;
  /** The log goes on past `lastSeq`: the trace read TRACE_MAX_EVENTS and stopped. */
  truncated: boolean;
  spans: Span[];
}

/**
 * Events a trace reads at most. Nothing else bounds a workflow's log: at
 * the default caps a pipeline runs up to 12 stages x 3 attempts x 11
 * turns of up to 16 tool calls each (TOOL_CALLS_MAX_PER_TURN, which an
 * operator may raise), and a user may retry a stage again and again. Measured (2 cores, 2026-12):
 * 4,472 events (5 tool calls a turn) made 2,235 spans, 0.73 MB, in
 * 0.2-0.7 s; 36,872 (50 a turn) 18,435 spans, 5.8 MB, in 1.3-2.9 s, all
 * held in memory while it is built and serialized.
 */
export const TRACE_MAX_EVENTS = 5000;

/**
 * The trace of a workflow of the tenant (404 for another tenant's or none),
 * as stored now, from its first TRACE_MAX_EVENTS events.
 */
export async function readWorkflowTrace(
  deps: { db: Db; workflows: Pick<WorkflowService, 'get'> },
  key: { tenantId: string; workflowId: string },
): Promise<WorkflowTrace> {
  const workflow = await deps.workflows.get(key.tenantId, key.workflowId);
  const repository = workflowEventsRepository(deps.db);
  const events: WorkflowEvent[] = [];
  // One event past the cap, to tell a log that ends there from one that goes on.
  for (let wanted = TRACE_MAX_EVENTS + 1; wanted > 0; ) {
    const limit = Math.min(PAGE, wanted);
    const rows = await repository.listAfter({
      workflowId: workflow.id,
      tenantId: key.tenantId,
      afterSeq: events.at(-1)?.seq ?? 0,
      limit,
    });
    events.push(...rows.map(toEvent));
    wanted -= rows.length;
    if (rows.length < limit) break;
  }
  const truncated = events.length > TRACE_MAX_EVENTS;
  return { ...buildTrace(workflow, events.slice(0, TRACE_MAX_EVENTS)), truncated };
}

const PAGE = 1000;

/** Spans from a workflow's events, in `seq` order. */
export function buildTrace(
  workflow: Pick<Workflow, 'id' | 'createdAt'>,
  events: readonly WorkflowEvent[],
): Omit<WorkflowTrace, 'truncated'> {
  let clock = workflow.createdAt.getTime();
  const root = newSpan({ id: 0, parentId: null, kind: 'workflow', name: 'workflow', at: clock });
  root.startSeq = null;
  const spans: Span[] = [root];
  /** Open calls and stage attempts by pairing key; open stage attempts by stage id. */
  const open = new Map<string, Span>();
  const openStages = new Map<string, Span>();
  /** Each call's and attempt's parent, by the call's or attempt's id. */
  const parentOfSpan = new Map<number, Span>();
  let wait: Span | undefined;

  for (const event of events) {
    clock = Math.max(clock, Date.parse(event.ts));
    const at = { seq: event.seq, clock };
    switch (event.type) {
      case 'workflow_start':
        if (Object.keys(root.attributes).length === 0) root.attributes = { ...event.detail };
        break;
      case 'llm_call':
      case 'tool_call':
      case 'stage': {
        const key = pairingKey(event);
        if (event.status === 'started') {
          const parent = parentOf(event, openStages) ?? root;
          const span = newSpan({
            id: event.seq,
            parentId: parent.id,
            kind: event.type,
            name: nameOf(event),
            at: clock,
            step: event.step,
            attributes: event.detail,
          });
          spans.push(span);
          open.set(key, span);
          parentOfSpan.set(span.id, parent);
          if (event.type === 'stage' && event.step) openStages.set(event.step, span);
        } else if (event.status === 'completed' || event.status === 'failed') {
          const span = open.get(key);
          if (!span) break;
          end(span, { ...at, status: event.status, detail: event.detail });
          startFromElapsed(span, {
            elapsedMs: event.elapsedMs,
            floor: (parentOfSpan.get(span.id) ?? root).startedAt.getTime(),
          });
          open.delete(key);
          if (event.type === 'stage' && event.step) openStages.delete(event.step);
        } else if (event.type === 'stage' && event.status === 'paused' && !wait) {
          wait = startWait(event, clock, 'stage_failed');
          spans.push(wait);
        }
        break;
      }
      case 'checkpoint':
      case 'clarification_request':
      case 'tool_approval_request':
      case 'synthesis_failed':
        if (!wait) {
          wait = startWait(event, clock, WAIT_NAMES[event.type]);
          spans.push(wait);
        }
        break;
      case 'review':
      case 'clarification_answer':
      case 'tool_approval':
        if (wait) end(wait, { ...at, status: 'completed', detail: event.detail });
        wait = undefined;
        break;
      case 'workflow_end': {
        const status = toEndStatus(event.status);
        // The log ends every call and attempt before its end (README, Events); should one
        // not have been, it ends here rather than show as running forever.
        for (const span of open.values()) end(span, { ...at, status: 'failed', detail: {} });
        open.clear();
        openStages.clear();
        if (wait) end(wait, { ...at, status, detail: {} });
        wait = undefined;
        end(root, { ...at, status, detail: event.detail });
        break;
      }
      default:
        break;
    }
  }
  return { workflowId: workflow.id, lastSeq: events.at(-1)?.seq ?? 0, spans };
}

function newSpan(input: {
  id: number;
  parentId: number | null;
  kind: SpanKind;
  name: string;
  at: number;
  step?: string | null;
  attributes?: Record<string, unknown>;
}): Span {
  return {
    id: input.id,
    parentId: input.parentId,
    kind: input.kind,
    name: input.name,
    step: input.step ?? null,
    status: 'open',
    startSeq: input.id,
    endSeq: null,
    startedAt: new Date(input.at),
    endedAt: null,
    durationMs: null,
    attributes: { ...input.attributes },
  };
}

function end(
  span: Span,
  ending: { seq: number; clock: number; status: SpanStatus; detail: Record<string, unknown> },
): void {
  span.status = ending.status;
  span.endSeq = ending.seq;
  span.endedAt = new Date(ending.clock);
  span.durationMs = ending.clock - span.startedAt.getTime();
  span.attributes = { ...span.attributes, ...ending.detail };
}

/**
 * Moves a span's start back to `elapsedMs` before its end when that is
 * earlier than the write of its start event, but not before `floor`, its
 * parent's start.
 */
function startFromElapsed(span: Span, measured: { elapsedMs: number | undefined; floor: number }) {
  if (measured.elapsedMs === undefined || span.endedAt === null) return;
  const end = span.endedAt.getTime();
  const start = Math.max(
    measured.floor,
    Math.min(span.startedAt.getTime(), end - Math.round(measured.elapsedMs)),
  );
  span.startedAt = new Date(start);
  span.durationMs = end - start;
}

/** A pause: its detail but a checkpoint's result, which the pipeline view shows. */
/** A wait's name, the reason the workflow paused, by the event that paused it. */
const WAIT_NAMES = {
  checkpoint: 'checkpoint',
  clarification_request: 'clarification',
  tool_approval_request: 'tool_approval',
  synthesis_failed: 'synthesis_failed',
} as const;

function startWait(event: WorkflowEvent, at: number, reason: string): Span {
  const { result: _result, ...detail } = event.detail;
  return newSpan({
    id: event.seq,
    parentId: 0,
    kind: 'wait',
    name: reason,
    at,
    step: event.step,
    attributes: { ...detail, reason },
  });
}

/** As `listOpenWork` pairs them: type, step, and a tool call's id or a stage's attempt. */
function pairingKey(event: WorkflowEvent): string {
  const item =
    event.type === 'tool_call'
      ? event.detail.callId
      : event.type === 'stage'
        ? event.detail.attempt
        : null;
  return JSON.stringify([event.type, event.step, item ?? null]);
}

/** The stage attempt a call belongs to: the one open for the stage its step names (`<stage>/turn-<n>`). */
function parentOf(event: WorkflowEvent, openStages: Map<string, Span>): Span | undefined {
  if (event.type === 'stage' || !event.step) return undefined;
  const slash = event.step.lastIndexOf('/');
  return slash === -1 ? undefined : openStages.get(event.step.slice(0, slash));
}

function nameOf(event: WorkflowEvent): string {
  if (event.type === 'tool_call' && typeof event.detail.tool === 'string') return event.detail.tool;
  return event.step ?? event.type;
}

function toEndStatus(status: WorkflowEvent['status']): SpanStatus {
  return status === 'cancelled' ? 'cancelled' : status === 'completed' ? 'completed' : 'failed';
}
