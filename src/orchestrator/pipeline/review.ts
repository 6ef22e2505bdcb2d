import { badRequest, conflict, notFound } from '../../errors.js';
import type { Db } from '../../store/database.js';
import {
  loadWorkflowWithPipeline,
  type PipelineRows,
  pipelineAfterReview,
  reviewedRowsColumns,
} from '../../store/pipeline-rows.js';
import {
  acceptAfterTransition,
  beginAfterTransition,
} from '../../store/pipeline-transition-writes.js';
import type { AttemptReason, StageAttempt } from '../../store/pipelines.js';
import { toWorkflow } from '../../workflows/rows.js';
import type { WorkflowService } from '../../workflows/service.js';
import { assertAwaiting } from '../../workflows/transitions.js';
import type { AwaitingReason, Workflow } from '../../workflows/types.js';
import { nextAction, type PipelinePolicy } from './next-action.js';
import {
  buildPipelineView,
  loadPipelineState,
  type PipelineState,
  type PipelineView,
  pipelinePhaseOf,
  pipelineStateOf,
} from './pipeline-view.js';
import { type ExecutionPlan, type PlanStage, replaceStagesAfter } from './plan.js';
import { type ReviewCte, type ReviewStep, requestedRerun, revisedPlan } from './review-steps.js';
import type { PipelineSettings } from './run-pipeline.js';
import { stageStartedEvent } from './run-stage.js';
import { SYNTHESIS_STEP } from './synthesize.js';

/**
 * What a user does to a pipeline paused at a checkpoint or at a failed
 * stage: `continue` to the next stage, `modify` (re-run the stage with
 * feedback, optionally replacing the stages not yet run) or `retry` (re-run
 * it as it was). Each is one compare-and-set: the decision is written as
 * stage-attempt rows (and a modify's plan revision, with its `plan` event)
 * in the transaction that moves the workflow back to `running`, with a
 * `review` event, so the run (on any replica) finds it.
 * The same statement starts the stage the pipeline goes on with (its
 * attempt row and `stage started` event): a client sees it start as the
 * review commits, not a statement later when the run would have started it.
 */

/** The pauses a review of a stage resumes. */
const REVIEWABLE: readonly AwaitingReason[] = ['checkpoint', 'stage_failed'];
/** A failed synthesis is retried alone: no stage is under review, none runs again. */
const RETRYABLE: readonly AwaitingReason[] = [...REVIEWABLE, 'synthesis_failed'];

export interface ReviewInput {
  /** The workflow version the client saw; the current one when absent. */
  version?: number;
}

export interface ModifyInput extends ReviewInput {
  feedback: string;
  /** Stages that replace the ones after the current stage, validated like a planned plan. */
  plan?: { stages: unknown[] };
}

/** A workflow paused for review, with its pipeline as read at its version. */
interface Paused {
  workflow: Workflow;
  state: PipelineState;
  rows: PipelineRows;
  stage: PlanStage;
  attempt: number;
}

export function createPipelineReviews(options: {
  db: Db;
  workflows: Pick<WorkflowService, 'get' | 'resume'>;
  settings: PipelineSettings;
}) {
  const { db, workflows } = options;
  const policy: PipelinePolicy = { maxValidationRetries: options.settings.maxValidationRetries };

  /**
   * The paused workflow and its pipeline, read at one version: the workflow
   * and its rows in one statement, one snapshot, so the rows are those of
   * the version the transition then compares, and a decision taken on rows
   * a concurrent run has changed since fails that check.
   */
  async function loadPaused(
    tenantId: string,
    id: string,
    reasons: readonly AwaitingReason[],
  ): Promise<{ workflow: Workflow; rows: PipelineRows }> {
    const found = await loadWorkflowWithPipeline(db, { tenantId, workflowId: id });
    if (!found) throw notFound('Workflow');
    const workflow = toWorkflow(found.workflow);
    assertAwaiting(workflow, reasons);
    return { workflow, rows: found.pipeline };
  }

  /** The paused workflow and the stage its pause is about, read at one version. */
  async function pausedStage(tenantId: string, id: string): Promise<Paused> {
    return stageUnderReview(await loadPaused(tenantId, id, REVIEWABLE));
  }

  function stageUnderReview(found: { workflow: Workflow; rows: PipelineRows }): Paused {
    const { workflow } = found;
    const state = pipelineStateOf(found.rows);
    const action = state && nextAction(state.plan, state.attempts, policy);
    if (!state || !action || (action.kind !== 'await_review' && action.kind !== 'stage_failed')) {
      // The rows say the stage needs no review: the pause is stale (a run is about to act).
      throw conflict('not_awaiting_input', 'The workflow has no stage waiting for review');
    }
    return { workflow, state, rows: found.rows, stage: action.stage, attempt: action.attempt };
  }

  /**
   * Runs the failed synthesis again: the run the resume launches finds
   * every stage done (next-action.ts) and writes the answer, with the rows
   * as they were read.
   */
  function retrySynthesis(
    paused: { workflow: Workflow; rows: PipelineRows },
    input: ReviewInput,
  ): Promise<Workflow> {
    const { tenantId, id, version } = paused.workflow;
    return workflows.resume(tenantId, id, {
      fromAwaiting: ['synthesis_failed'],
      expectedVersion: input.version ?? version,
      cause: 'reviewed',
      events: [
        {
          type: 'review',
          step: SYNTHESIS_STEP,
          status: 'completed',
          detail: { action: 'retry' },
          elapsedMs: null,
        },
      ],
      pipelineAfter: () => paused.rows,
    });
  }

  /**
   * Resumes the paused workflow with the review's event and writes, at the
   * version the client saw (or the one the pause was read at), and begins
   * the stage that comes next. The transition also returns the rows its
   * CTEs wrote: with the rows read at that version, they are the pipeline as
   * the run it launches finds it, without reading it again.
   */
  function resumeReviewed(
    paused: Paused,
    input: ReviewInput,
    review: {
      detail: Record<string, unknown>;
      writes: ReviewCte[];
      /** A modify's plan revision with its `plan` event, written between the review and the start. */
      revised?: ReviewStep;
      next: ReviewStep | undefined;
    },
  ): Promise<Workflow> {
    const { tenantId, id } = paused.workflow;
    const steps = [review.revised, review.next].filter((step) => step !== undefined);
    const writes = [...review.writes, ...steps.map((step) => step.write)];
    return workflows.resume(tenantId, id, {
      fromAwaiting: REVIEWABLE,
      expectedVersion: input.version ?? paused.workflow.version,
      cause: 'reviewed',
      events: [reviewEvent(paused, review.detail), ...steps.map((step) => step.event)],
      alsoInStatement: writes.map((write) => write.cte),
      alsoSelect: reviewedRowsColumns(writes.map((write) => write.name)),
      pipelineAfter: (also) => pipelineAfterReview(paused.rows, also),
    });
  }

  /**
   * The attempt the pipeline goes on with, decided as the run would decide
   * it (next-action.ts) on the rows as the review leaves them, with its
   * `stage started` event; undefined when no stage runs next (the synthesis
   * does). The run launched by the review runs that attempt
   * (run-pipeline.ts, `begun`).
   */
  function beginNext(
    plan: ExecutionPlan,
    revision: number,
    after: readonly StageAttempt[],
  ): ReviewStep | undefined {
    const action = nextAction(plan, after, policy);
    if (action.kind !== 'run_stage' || action.interruptedAttempt !== null) return undefined;
    return {
      write: {
        cte: beginAfterTransition({
          stageId: action.stage.id,
          attempt: action.attempt,
          planRevision: revision,
          reason: action.reason,
          feedback: action.feedback,
        }),
        name: 'begun',
      },
      event: stageStartedEvent(action),
    };
  }

  /** A re-run of the paused stage: begun by the review, as the next decision takes it. */
  function beginRerun(
    paused: Paused,
    rerun: {
      plan: ExecutionPlan;
      revision: number;
      reason: AttemptReason;
      feedback: string | null;
    },
  ) {
    const next = beginNext(rerun.plan, rerun.revision, [
      ...paused.state.attempts,
      requestedRerun(paused, rerun),
    ]);
    if (!next) {
      throw new Error(`a re-run of stage "${paused.stage.id}" is not what the pipeline does next`);
    }
    return next;
  }

  function reviewEvent(
    paused: { stage: { id: string; title: string }; attempt: number },
    detail: Record<string, unknown>,
  ) {
    return {
      type: 'review',
      step: paused.stage.id,
      status: 'completed',
      detail: {
        stage: paused.stage.id,
        title: paused.stage.title,
        attempt: paused.attempt,
        ...detail,
      },
      elapsedMs: null,
    };
  }

  return {
    /** Accepts the paused stage's outcome; the pipeline goes on with the next stage. */
    async continue(tenantId: string, id: string, input: ReviewInput): Promise<Workflow> {
      const paused = await pausedStage(tenantId, id);
      const acceptedAt = new Date();
      const accepted = paused.state.attempts.map((attempt) =>
        attempt.stageId === paused.stage.id && attempt.attempt === paused.attempt
          ? { ...attempt, acceptedAt }
          : attempt,
      );
      return resumeReviewed(paused, input, {
        detail: { action: 'continue' },
        writes: [
          {
            cte: acceptAfterTransition({ stageId: paused.stage.id, attempt: paused.attempt }),
            name: 'accepted',
          },
        ],
        next: beginNext(paused.state.plan, paused.state.revision, accepted),
      });
    },

    /** Runs the paused stage again, as it was; or the synthesis, when it failed. */
    async retry(tenantId: string, id: string, input: ReviewInput): Promise<Workflow> {
      const found = await loadPaused(tenantId, id, RETRYABLE);
      if (found.workflow.awaitingReason === 'synthesis_failed') return retrySynthesis(found, input);
      const paused = stageUnderReview(found);
      return resumeReviewed(paused, input, {
        detail: { action: 'retry' },
        writes: [],
        next: beginRerun(paused, {
          plan: paused.state.plan,
          revision: paused.state.revision,
          reason: 'user_retry',
          feedback: null,
        }),
      });
    },

    /**
     * Runs the paused stage again with the user's feedback; with `plan`,
     * the stages after it are replaced first (a new plan revision, told with
     * a `plan` event as the planner's is, so a client drawing the stages
     * from those events sees the new ones). An empty `plan` drops them: the
     * synthesis follows the re-run (once continued, at a checkpoint).
     */
    async modify(tenantId: string, id: string, input: ModifyInput): Promise<Workflow> {
      const paused = await pausedStage(tenantId, id);
      let replacement: ExecutionPlan | undefined;
      if (input.plan) {
        const patched = replaceStagesAfter(paused.state.plan, paused.stage.id, input.plan, {
          maxStages: options.settings.maxStages,
        });
        if (!patched.ok) {
          throw badRequest(
            'invalid_plan',
            'The plan does not validate',
            patched.issues.map((issue) => ({ field: 'body.plan', message: issue })),
          );
        }
        replacement = patched.plan;
      }
      const revision = replacement ? paused.state.revision + 1 : paused.state.revision;
      return resumeReviewed(paused, input, {
        detail: {
          action: 'modify',
          feedback: input.feedback,
          planReplaced: replacement !== undefined,
        },
        writes: [],
        ...(replacement ? { revised: revisedPlan(revision, replacement) } : {}),
        next: beginRerun(paused, {
          plan: replacement ?? paused.state.plan,
          revision,
          reason: 'user_modify',
          feedback: input.feedback,
        }),
      });
    },

    /** The plan and each stage's status, attempts and result; 404 before the plan exists. */
    async view(tenantId: string, id: string): Promise<PipelineView> {
      const workflow = await workflows.get(tenantId, id);
      const state = await loadPipelineState(db, { tenantId, workflowId: id });
      if (!state) throw notFound('Pipeline');
      // The workflow read first: one that ended meanwhile shows its rows as still running.
      return buildPipelineView(state, policy, pipelinePhaseOf(workflow));
    },
  };
}

export type PipelineReviews = ReturnType<typeof createPipelineReviews>;
