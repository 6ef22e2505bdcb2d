import { badRequest, conflict, notFound } from '../../errors.js';
import type { Db } from '../../store/database.js';
import {
  loadWorkflowWithPipeline,
  type PipelineRows,
  pipelineAfterReview,
  type ReviewWrite,
  reviewedRowsColumns,
} from '../../store/pipeline-rows.js';
import {
  acceptAfterTransition,
  planRevisionAfterTransition,
  rerunAfterTransition,
} from '../../store/pipelines.js';
import { toWorkflow } from '../../workflows/rows.js';
import type { WorkflowService } from '../../workflows/service.js';
import { assertAwaiting } from '../../workflows/transitions.js';
import type { AwaitingReason, Workflow } from '../../workflows/types.js';
import { nextAction, type PipelinePolicy } from './next-action.js';
import {
  buildPipelineView,
  loadPipelineState,
  type PipelineView,
  pipelineStateOf,
} from './pipeline-view.js';
import { replaceStagesAfter, toStoredPlan } from './plan.js';
import type { PipelineSettings } from './run-pipeline.js';

/**
 * What a user does to a pipeline paused at a checkpoint or at a failed
 * stage: `continue` to the next stage, `modify` (re-run the stage with
 * feedback, optionally replacing the stages not yet run) or `retry` (re-run
 * it as it was). Each is one compare-and-set: the decision is written as
 * stage-attempt rows in the transaction that moves the workflow back to
 * `running`, with a `review` event, so the run (on any replica) finds it.
 */

/** The pauses a review resumes. */
const REVIEWABLE: readonly AwaitingReason[] = ['checkpoint', 'stage_failed'];

export interface ReviewInput {
  /** The workflow version the client saw; the current one when absent. */
  version?: number;
}

export interface ModifyInput extends ReviewInput {
  feedback: string;
  /** Stages that replace the ones after the current stage, validated like a planned plan. */
  plan?: { stages: unknown[] };
}

export function createPipelineReviews(options: {
  db: Db;
  workflows: Pick<WorkflowService, 'get' | 'resume'>;
  settings: PipelineSettings;
}) {
  const { db, workflows } = options;
  const policy: PipelinePolicy = { maxValidationRetries: options.settings.maxValidationRetries };

  /** The paused workflow and the stage its pause is about, read at one version. */
  async function pausedStage(tenantId: string, id: string) {
    // The workflow and its rows in one statement, one snapshot: the rows are
    // those of the version the transition then compares, so a decision
    // taken on rows a concurrent run has changed since fails that check.
    const found = await loadWorkflowWithPipeline(db, { tenantId, workflowId: id });
    if (!found) throw notFound('Workflow');
    const workflow = toWorkflow(found.workflow);
    assertAwaiting(workflow, REVIEWABLE);
    const state = pipelineStateOf(found.pipeline);
    const action = state && nextAction(state.plan, state.attempts, policy);
    if (!state || !action || (action.kind !== 'await_review' && action.kind !== 'stage_failed')) {
      // The rows say the stage needs no review: the pause is stale (a run is about to act).
      throw conflict('not_awaiting_input', 'The workflow has no stage waiting for review');
    }
    return { workflow, state, rows: found.pipeline, stage: action.stage, attempt: action.attempt };
  }

  /**
   * The review's transition also returns the rows its CTEs wrote: with the
   * rows read at the version it compared, they are the pipeline as the run
   * it launches finds it, without reading it again.
   */
  function rowsAfter(paused: { rows: PipelineRows }, writes: ReviewWrite[]) {
    return {
      alsoSelect: reviewedRowsColumns(writes),
      pipelineAfter: (also: Record<string, unknown>) => pipelineAfterReview(paused.rows, also),
    };
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
      return workflows.resume(tenantId, id, {
        fromAwaiting: REVIEWABLE,
        expectedVersion: input.version ?? paused.workflow.version,
        cause: 'reviewed',
        events: [reviewEvent(paused, { action: 'continue' })],
        alsoInStatement: [
          acceptAfterTransition({ stageId: paused.stage.id, attempt: paused.attempt }),
        ],
        ...rowsAfter(paused, ['accepted']),
      });
    },

    /** Runs the paused stage again, as it was. */
    async retry(tenantId: string, id: string, input: ReviewInput): Promise<Workflow> {
      const paused = await pausedStage(tenantId, id);
      return workflows.resume(tenantId, id, {
        fromAwaiting: REVIEWABLE,
        expectedVersion: input.version ?? paused.workflow.version,
        cause: 'reviewed',
        events: [reviewEvent(paused, { action: 'retry' })],
        alsoInStatement: [
          rerunAfterTransition({
            stageId: paused.stage.id,
            planRevision: paused.state.revision,
            reason: 'user_retry',
            feedback: null,
          }),
        ],
        ...rowsAfter(paused, ['rerun']),
      });
    },

    /**
     * Runs the paused stage again with the user's feedback; with `plan`,
     * the stages after it are replaced first (a new plan revision).
     */
    async modify(tenantId: string, id: string, input: ModifyInput): Promise<Workflow> {
      const paused = await pausedStage(tenantId, id);
      let replacement: ReturnType<typeof toStoredPlan> | undefined;
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
        replacement = toStoredPlan(patched.plan);
      }
      const revision = replacement ? paused.state.revision + 1 : paused.state.revision;
      return workflows.resume(tenantId, id, {
        fromAwaiting: REVIEWABLE,
        expectedVersion: input.version ?? paused.workflow.version,
        cause: 'reviewed',
        events: [
          reviewEvent(paused, {
            action: 'modify',
            feedback: input.feedback,
            planReplaced: replacement !== undefined,
          }),
        ],
        // The version check makes the revision read with the pause the latest one.
        alsoInStatement: [
          ...(replacement
            ? [planRevisionAfterTransition({ revision: revision, plan: replacement })]
            : []),
          rerunAfterTransition({
            stageId: paused.stage.id,
            planRevision: revision,
            reason: 'user_modify',
            feedback: input.feedback,
          }),
        ],
        ...rowsAfter(paused, replacement ? ['rerun', 'revised'] : ['rerun']),
      });
    },

    /** The plan and each stage's status, attempts and result; 404 before the plan exists. */
    async view(tenantId: string, id: string): Promise<PipelineView> {
      await workflows.get(tenantId, id);
      const state = await loadPipelineState(db, { tenantId, workflowId: id });
      if (!state) throw notFound('Pipeline');
      return buildPipelineView(state, policy);
    },
  };
}

export type PipelineReviews = ReturnType<typeof createPipelineReviews>;
