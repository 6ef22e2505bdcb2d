/**
 * Terminology (used everywhere, without synonyms):
 * - workflow: one question and everything done to answer it; a row in `workflows`.
 * - session: a conversation that groups workflows; its history feeds later workflows.
 * - pipeline: the complex path: a plan executed stage by stage.
 * - plan: the planner's list of stages for a pipeline.
 * - stage: one unit of a plan, run as a sub-agent tool loop.
 * - step: a named unit of work that events refer to (`step` field), e.g. `model`, `stage-1`.
 * - turn: one model call (see src/llm/types.ts).
 * - tool call: the model asking for a tool to run.
 * - checkpoint: a persisted pause after a stage, awaiting continue / modify / retry.
 * - event: one WorkflowTracker record: persisted (with a seq) unless it is a token chunk.
 */

export const WORKFLOW_STATUSES = [
  'queued',
  'running',
  'awaiting_input',
  'completed',
  'failed',
  'cancelled',
] as const;
export type WorkflowStatus = (typeof WORKFLOW_STATUSES)[number];

export const AWAITING_REASONS = ['checkpoint', 'clarification', 'stage_failed'] as const;
export type AwaitingReason = (typeof AWAITING_REASONS)[number];

export const WORKFLOW_MODES = ['auto', 'simple', 'complex'] as const;
export type WorkflowMode = (typeof WORKFLOW_MODES)[number];
export type WorkflowKind = 'simple' | 'complex';

export const FINISHED_STATUSES: readonly WorkflowStatus[] = ['completed', 'failed', 'cancelled'];

export function isFinished(status: WorkflowStatus): boolean {
  return FINISHED_STATUSES.includes(status);
}

/** The closed union of event types. */
export const EVENT_TYPES = [
  'workflow_start',
  'classification',
  'llm_call',
  'llm_retry',
  'llm_fallback',
  'tool_call',
  'stage',
  'checkpoint',
  'clarification_request',
  'warning',
  'token',
  'answer',
  'usage',
  'workflow_end',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const EVENT_STATUSES = [
  'started',
  'completed',
  'failed',
  'streaming',
  'info',
  'cancelled',
  'paused',
  'retrying',
] as const;
export type EventStatus = (typeof EVENT_STATUSES)[number];

/** A WorkflowTracker event as stored, replayed and streamed. `seq` is 0 for token chunks, which are not stored. */
export interface WorkflowEvent {
  seq: number;
  workflowId: string;
  type: EventType;
  step: string | null;
  status: EventStatus;
  detail: Record<string, unknown>;
  ts: string;
  elapsedMs?: number;
}

export interface WorkflowError {
  code: string;
  message: string;
}

export interface WorkflowUsage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costUsd: number;
}

export interface Workflow {
  id: string;
  tenantId: string;
  sessionId: string | null;
  status: WorkflowStatus;
  awaitingReason: AwaitingReason | null;
  mode: WorkflowMode;
  kind: WorkflowKind | null;
  model: string;
  input: string;
  tools: string[];
  metadata: Record<string, unknown>;
  version: number;
  lastSeq: number;
  result: { answer: string } | null;
  error: WorkflowError | null;
  usage: WorkflowUsage;
  createdAt: Date;
  updatedAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}
