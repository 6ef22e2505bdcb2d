import type { DbOrTx } from '../../store/database.js';
import { loadPipelineRows, type PipelineRows } from '../../store/pipeline-rows.js';
import type {
  AttemptError,
  AttemptReason,
  AttemptStatus,
  AttemptUsage,
  StageAttempt,
  StageValidationRecord,
  WorkflowKey,
} from '../../store/pipelines.js';
import {
  attemptsByStage,
  type NextAction,
  nextAction,
  type PipelinePolicy,
  type StageProgress,
  stageProgress,
} from './next-action.js';
import { type ExecutionPlan, type PlanStage, parseStoredPlan } from './plan.js';

/**
 * What `GET /v1/workflows/:id/pipeline` shows: the current plan and, for
 * each stage, its status, its attempts and its latest result. Statuses come
 * from the same decision the run takes (next-action.ts), so the view never
 * disagrees with what the pipeline will do.
 */

export type StageStatus = 'pending' | 'running' | 'completed' | 'failed' | 'awaiting_review';

export interface AttemptView {
  attempt: number;
  status: AttemptStatus;
  reason: AttemptReason;
  feedback: string | null;
  validation: StageValidationRecord | null;
  error: AttemptError | null;
  usage: AttemptUsage;
  accepted: boolean;
  startedAt: Date | null;
  finishedAt: Date | null;
  elapsedMs: number | null;
}

export interface StageView extends PlanStage {
  status: StageStatus;
  attempts: AttemptView[];
  /** The latest attempt's result that exists: the one to review at a checkpoint or a stage failure. */
  result: string | null;
}

export interface PipelineView {
  revision: number;
  stages: StageView[];
  next: NextAction['kind'];
  /** The stage `next` concerns; null once every stage is done. */
  currentStageId: string | null;
}

/** The persisted pipeline: the current plan revision and every attempt. */
export interface PipelineState {
  revision: number;
  plan: ExecutionPlan;
  attempts: StageAttempt[];
}

/** Undefined until the planner's plan is saved. */
export async function loadPipelineState(
  db: DbOrTx,
  key: WorkflowKey,
): Promise<PipelineState | undefined> {
  return pipelineStateOf(await loadPipelineRows(db, key));
}

/** The rows as a pipeline state; undefined before the plan is saved. */
export function pipelineStateOf(rows: PipelineRows): PipelineState | undefined {
  if (!rows.plan) return undefined;
  return {
    revision: rows.plan.revision,
    plan: parseStoredPlan(rows.plan.plan),
    attempts: rows.attempts,
  };
}

export async function loadPipelineView(
  db: DbOrTx,
  key: WorkflowKey,
  policy: PipelinePolicy,
): Promise<PipelineView | undefined> {
  const state = await loadPipelineState(db, key);
  return state && buildPipelineView(state, policy);
}

export function buildPipelineView(state: PipelineState, policy: PipelinePolicy): PipelineView {
  const byStage = attemptsByStage(state.attempts);
  let current: PlanStage | undefined;
  const stages = state.plan.stages.map((stage): StageView => {
    const attempts = byStage.get(stage.id) ?? [];
    let status: StageStatus = 'pending';
    if (!current) {
      const progress = stageProgress(stage, attempts, policy);
      status = statusOf(progress, attempts);
      if (progress.kind !== 'done') current = stage;
    }
    return {
      ...stage,
      status,
      attempts: attempts.map(toAttemptView),
      result: attempts.findLast((attempt) => attempt.result !== null)?.result ?? null,
    };
  });
  return {
    revision: state.revision,
    stages,
    next: nextAction(state.plan, state.attempts, policy).kind,
    currentStageId: current?.id ?? null,
  };
}

function statusOf(progress: StageProgress, attempts: readonly StageAttempt[]): StageStatus {
  switch (progress.kind) {
    case 'done':
      return progress.latest.status === 'completed' ? 'completed' : 'failed';
    case 'run_stage':
      return attempts.length === 0 ? 'pending' : 'running';
    case 'await_review':
      return 'awaiting_review';
    case 'stage_failed':
      return 'failed';
  }
}

function toAttemptView(attempt: StageAttempt): AttemptView {
  return {
    attempt: attempt.attempt,
    status: attempt.status,
    reason: attempt.reason,
    feedback: attempt.feedback,
    validation: attempt.validation,
    error: attempt.error,
    usage: attempt.usage,
    accepted: attempt.acceptedAt !== null,
    startedAt: attempt.startedAt,
    finishedAt: attempt.finishedAt,
    elapsedMs: attempt.elapsedMs,
  };
}
