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
import { isFinished, type Workflow } from '../../workflows/types.js';
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

/**
 * `skipped`: never run, as the workflow ended first (a budget's early
 * answer, a cancel, a failure), or as a budget's synthesis, failed and
 * waiting for its retry, answers instead.
 */
export type StageStatus =
  | 'pending'
  | 'running'
  | 'completed'
  | 'failed'
  | 'awaiting_review'
  | 'skipped';

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
  /**
   * `none` once the workflow has ended: nothing more will run;
   * `synthesis_failed` while it waits for a `retry` of its failed synthesis.
   */
  next: NextAction['kind'] | 'synthesis_failed' | 'none';
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

/**
 * Where the workflow stands, for its pipeline's view: `open` while the
 * rows say what its run does next; `synthesis_failed` while it waits for a
 * `retry` of its failed synthesis, which runs nothing but the synthesis
 * (review.ts), so no stage runs again, not even one a budget's early
 * synthesis left undone; `ended` once it has finished.
 */
export type PipelinePhase = 'open' | 'synthesis_failed' | 'ended';

export function pipelinePhaseOf(
  workflow: Pick<Workflow, 'status' | 'awaitingReason'>,
): PipelinePhase {
  if (isFinished(workflow.status)) return 'ended';
  return workflow.awaitingReason === 'synthesis_failed' ? 'synthesis_failed' : 'open';
}

/**
 * Out of the `open` phase, what the run would do next never happens: a
 * stage it would have run or waited on is shown as what its attempts say
 * (never run: `skipped`), no stage is current, and `next` says why nothing
 * runs (`none`, `synthesis_failed`). The run's own decision stays
 * `synthesize` for a failed synthesis: that is what its retry does.
 */
export function buildPipelineView(
  state: PipelineState,
  policy: PipelinePolicy,
  phase: PipelinePhase,
): PipelineView {
  const settled = phase !== 'open';
  const byStage = attemptsByStage(state.attempts);
  let current: PlanStage | undefined;
  const stages = state.plan.stages.map((stage): StageView => {
    const attempts = byStage.get(stage.id) ?? [];
    let status: StageStatus = settled ? 'skipped' : 'pending';
    if (!current) {
      const progress = stageProgress(stage, attempts, policy);
      status = settled ? settledStatusOf(progress, attempts) : statusOf(progress, attempts);
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
    next: nextOf(state, policy, phase),
    currentStageId: settled ? null : (current?.id ?? null),
  };
}

function nextOf(
  state: PipelineState,
  policy: PipelinePolicy,
  phase: PipelinePhase,
): PipelineView['next'] {
  switch (phase) {
    case 'ended':
      return 'none';
    case 'synthesis_failed':
      return 'synthesis_failed';
    case 'open':
      return nextAction(state.plan, state.attempts, policy).kind;
  }
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

/**
 * The stage at which the run stopped, of a workflow finished or waiting for
 * its synthesis's retry: its latest attempt that began decides (one still
 * running when the workflow ended was failed with it); a stage none began
 * was never run.
 */
function settledStatusOf(progress: StageProgress, attempts: readonly StageAttempt[]): StageStatus {
  if (progress.kind === 'done') return statusOf(progress, attempts);
  const latest = attempts.findLast((attempt) => attempt.status !== 'pending');
  if (!latest) return 'skipped';
  return latest.status === 'completed' ? 'completed' : 'failed';
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
