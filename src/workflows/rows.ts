import type { WorkflowEventRow, WorkflowRow } from '../store/schema.js';
import type {
  AwaitingReason,
  EventStatus,
  EventType,
  Workflow,
  WorkflowBudget,
  WorkflowError,
  WorkflowEvent,
  WorkflowKind,
  WorkflowMode,
  WorkflowResult,
  WorkflowStatus,
} from './types.js';

/** Rows are written only through this module's callers, so their text columns hold the union values. */
export function toWorkflow(row: WorkflowRow): Workflow {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    sessionId: row.session_id,
    status: row.status as WorkflowStatus,
    awaitingReason: row.awaiting_reason as AwaitingReason | null,
    mode: row.mode as WorkflowMode,
    kind: row.kind as WorkflowKind | null,
    model: row.model,
    input: row.input,
    tools: row.tools,
    metadata: row.metadata,
    version: row.version,
    lastSeq: row.last_seq,
    result: toResult(row.result),
    error: (row.error as WorkflowError | null) ?? null,
    usage: {
      inputTokens: Number(row.input_tokens),
      outputTokens: Number(row.output_tokens),
      cachedInputTokens: Number(row.cached_input_tokens),
      costUsd: Number(row.cost_usd),
    },
    budget: (row.budget as WorkflowBudget | null) ?? null,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
  };
}

/**
 * Results stored before completion reasons existed have only an answer and
 * read as answered: which of them ended at a cap was never recorded.
 */
function toResult(stored: unknown): WorkflowResult | null {
  if (stored === null || stored === undefined) return null;
  const result = stored as { answer: string; reason?: WorkflowResult['reason'] };
  return { answer: result.answer, reason: result.reason ?? 'answered' };
}

export function toEvent(row: WorkflowEventRow): WorkflowEvent {
  return {
    seq: row.seq,
    workflowId: row.workflow_id,
    type: row.type as EventType,
    step: row.step,
    status: row.status as EventStatus,
    detail: row.detail,
    ts: row.ts.toISOString(),
    ...(row.elapsed_ms === null ? {} : { elapsedMs: row.elapsed_ms }),
  };
}
