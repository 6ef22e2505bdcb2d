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
 * - approval: the user's decision on a tool call of a tool that requires it, before it runs.
 * - event: one WorkflowTracker record: persisted (with a seq) unless it is a token chunk.
 * - budget: a workflow's caps on iterations, tokens and cost; reaching one ends it with a best-effort answer.
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

export const AWAITING_REASONS = [
  'checkpoint',
  'clarification',
  'stage_failed',
  'synthesis_failed',
  'tool_approval',
] as const;
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
  'plan',
  'stage',
  'checkpoint',
  'review',
  'clarification_request',
  'clarification_answer',
  'tool_approval_request',
  'tool_approval',
  'synthesis_failed',
  'resumed',
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

/** `total` with `usage` added; `usage` alone when there is no total yet. */
export function addWorkflowUsage(
  total: WorkflowUsage | undefined,
  usage: WorkflowUsage,
): WorkflowUsage {
  if (!total) return { ...usage };
  return {
    inputTokens: total.inputTokens + usage.inputTokens,
    outputTokens: total.outputTokens + usage.outputTokens,
    cachedInputTokens: total.cachedInputTokens + usage.cachedInputTokens,
    costUsd: total.costUsd + usage.costUsd,
  };
}

/**
 * The caps of one workflow, resolved when it is created (request, then
 * tenant override, then configured default). `maxTokens` counts input plus
 * output tokens of all its model turns; null leaves that dimension uncapped.
 */
export interface WorkflowBudget {
  maxIterations: number;
  maxTokens: number | null;
  maxCostUsd: number | null;
}

/** The budget caps, by the name their `warning` event and a completed workflow's reason carry. */
export const BUDGET_CAPS = ['iteration_cap', 'token_budget', 'cost_budget'] as const;
export type BudgetCap = (typeof BUDGET_CAPS)[number];

/**
 * Why a workflow's result is what it is: the model answered; a budget cap
 * was reached and one last turn without tools answered from what was
 * gathered; the conversation outgrew the model's context window (a partial
 * answer); or the workflow was cancelled and `answer` is the text streamed
 * until then.
 */
export const COMPLETION_REASONS = [
  'answered',
  ...BUDGET_CAPS,
  'context_exhausted',
  'cancelled',
] as const;
export type CompletionReason = (typeof COMPLETION_REASONS)[number];

export interface WorkflowResult {
  answer: string;
  reason: CompletionReason;
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
  result: WorkflowResult | null;
  error: WorkflowError | null;
  usage: WorkflowUsage;
  /** Null on workflows created before budgets existed: their runs use the configured defaults. */
  budget: WorkflowBudget | null;
  createdAt: Date;
  updatedAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}
