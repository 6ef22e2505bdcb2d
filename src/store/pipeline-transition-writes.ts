import { type RawBuilder, sql } from 'kysely';
import type { AttemptError, AttemptReason, WorkflowKey } from './pipelines.js';

/**
 * Stage-attempt and plan writes made inside a workflow's transition
 * statement (workflows/transitions.ts `alsoInStatement`): each is a
 * data-modifying CTE that selects `FROM changed`, the workflow row the
 * transition updated, so it happens if and only if the transition does, in
 * the same round trip. The repository (pipelines.ts) runs the review's
 * writes on their own over `workflowAsChanged`.
 */

/** Milliseconds from `startedAt` to now, by the database clock `startedAt` came from. */
export function elapsedMsSince(startedAt: RawBuilder<unknown>) {
  return sql<number>`round(extract(epoch from clock_timestamp() - ${startedAt}) * 1000)::integer`;
}

/**
 * The attempt a review starts in its own statement: the one the run it
 * launches runs first (orchestrator/pipeline/review.ts decides which).
 */
export interface BegunAttempt {
  stageId: string;
  attempt: number;
  planRevision: number;
  reason: AttemptReason;
  feedback: string | null;
}

/**
 * `begun`: the stage's next attempt, started. The attempt number comes from
 * the rows the review read at the version the transition compares, so no
 * other write can have taken it. A crash before the run ends it leaves it
 * `started`, like every attempt cut off midway: the next run fails it as
 * interrupted and runs the stage again.
 */
export function beginAfterTransition(input: BegunAttempt) {
  return sql`begun AS (
    INSERT INTO workflow_stage_attempts
      (workflow_id, stage_id, attempt, tenant_id, plan_revision, status, reason, feedback, started_at)
    SELECT changed.id, ${input.stageId}, ${input.attempt}, changed.tenant_id, ${input.planRevision},
           'started', ${input.reason}, ${input.feedback}, clock_timestamp()
    FROM changed
    RETURNING *
  )`;
}

/** `accepted`: the user's `continue` on a finished attempt not accepted yet. */
export function acceptAfterTransition(input: { stageId: string; attempt: number }) {
  return sql`accepted AS (
    UPDATE workflow_stage_attempts SET accepted_at = now()
    FROM changed
    WHERE workflow_stage_attempts.workflow_id = changed.id
      AND workflow_stage_attempts.tenant_id = changed.tenant_id
      AND workflow_stage_attempts.stage_id = ${input.stageId}
      AND workflow_stage_attempts.attempt = ${input.attempt}
      AND workflow_stage_attempts.status IN ('completed', 'failed')
      AND workflow_stage_attempts.accepted_at IS NULL
    RETURNING workflow_stage_attempts.*
  )`;
}

/** The code of the error an attempt still running when its workflow ended is failed with. */
const WORKFLOW_ENDED = 'workflow_ended';

/**
 * `ended_attempts`: the attempts still `started` when their workflow ends
 * `failed` or `cancelled`, failed with it. No run will finish them (the
 * run's own end of the attempt only ends a started one, so a run still
 * going when a cancel commits changes nothing), and without this the
 * pipeline view would show their stages running forever.
 */
export function failStartedAttemptsAfterTransition(
  /** endedAttemptError's JSON, as a statement part. */
  error: RawBuilder<unknown>,
) {
  return sql`ended_attempts AS (
    UPDATE workflow_stage_attempts SET
      status = 'failed',
      error = ${error}::jsonb,
      finished_at = clock_timestamp(),
      elapsed_ms = ${elapsedMsSince(sql.ref('workflow_stage_attempts.started_at'))}
    FROM changed
    WHERE workflow_stage_attempts.workflow_id = changed.id
      AND workflow_stage_attempts.tenant_id = changed.tenant_id
      AND workflow_stage_attempts.status = 'started'
  )`;
}

/** The error of the attempts still running when their workflow ends `ended`. */
export function endedAttemptError(ended: 'failed' | 'cancelled'): AttemptError {
  return {
    code: WORKFLOW_ENDED,
    message:
      ended === 'cancelled'
        ? 'The workflow was cancelled during this attempt'
        : 'The workflow failed during this attempt',
  };
}

/** `revised`: the next plan revision (a `modify` with a plan patch). */
export function planRevisionAfterTransition(input: { revision: number; plan: object }) {
  return sql`revised AS (
    INSERT INTO workflow_plans (workflow_id, revision, tenant_id, plan)
    SELECT changed.id, ${input.revision}, changed.tenant_id, ${JSON.stringify(input.plan)}::jsonb
    FROM changed
    RETURNING revision, plan, created_at
  )`;
}

/** The workflow as a `changed` CTE, for the review writes made on their own. */
export function workflowAsChanged(key: WorkflowKey) {
  return sql`changed AS (
    SELECT id, tenant_id FROM workflows WHERE id = ${key.workflowId} AND tenant_id = ${key.tenantId}
  )`;
}
