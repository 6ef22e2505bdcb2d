import type { ReviewWrite } from '../../store/pipeline-rows.js';
import {
  type acceptAfterTransition,
  planRevisionAfterTransition,
} from '../../store/pipeline-transition-writes.js';
import { type AttemptReason, type StageAttempt, ZERO_USAGE } from '../../store/pipelines.js';
import type { NewEventRow } from '../../store/workflow-events.js';
import type { PipelineState } from './pipeline-view.js';
import { type ExecutionPlan, type PlanStage, planEventDetail, toStoredPlan } from './plan.js';
import { PLAN_STEP } from './planner.js';

/** The writes of a review (review.ts), each with the event that tells of it. */

/** One of a review's CTEs, and the name `reviewedRowsColumns` reads its rows by. */
export interface ReviewCte {
  cte: ReturnType<typeof acceptAfterTransition>;
  name: ReviewWrite;
}

/** A write of a review and the event that tells of it, so neither is written without the other. */
export interface ReviewStep {
  write: ReviewCte;
  event: NewEventRow;
}

/**
 * A modify's plan revision (`revision`, the one after the revision read at
 * the version the transition compares, so the latest one) and its `plan`
 * event. No planner turn made it: the event has no `repaired`.
 */
export function revisedPlan(revision: number, plan: ExecutionPlan): ReviewStep {
  return {
    write: {
      cte: planRevisionAfterTransition({ revision, plan: toStoredPlan(plan) }),
      name: 'revised',
    },
    event: {
      type: 'plan',
      step: PLAN_STEP,
      status: 'completed',
      detail: planEventDetail(revision, plan, 'modify'),
      elapsedMs: null,
    },
  };
}

/**
 * The re-run the user asks for as a row not started yet: what the decision
 * of what runs next is taken on, numbered after the stage's attempts as
 * read at the version the review compares.
 */
export function requestedRerun(
  paused: { state: PipelineState; stage: PlanStage },
  rerun: { revision: number; reason: AttemptReason; feedback: string | null },
): StageAttempt {
  const numbers = paused.state.attempts
    .filter((attempt) => attempt.stageId === paused.stage.id)
    .map((attempt) => attempt.attempt);
  return {
    stageId: paused.stage.id,
    attempt: Math.max(0, ...numbers) + 1,
    planRevision: rerun.revision,
    status: 'pending',
    reason: rerun.reason,
    feedback: rerun.feedback,
    result: null,
    validation: null,
    error: null,
    usage: ZERO_USAGE,
    acceptedAt: null,
    createdAt: new Date(),
    startedAt: null,
    finishedAt: null,
    elapsedMs: null,
  };
}
