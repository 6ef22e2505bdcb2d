import { type Selectable, sql } from 'kysely';
import type { DbOrTx } from './database.js';
import {
  type PlanRevision,
  type StageAttempt,
  toStageAttempt,
  type WorkflowKey,
} from './pipelines.js';
import type { WorkflowRow, WorkflowStageAttemptsTable } from './schema.js';

/**
 * A pipeline's rows read in one statement: a run reads them before its
 * stages, a review (with the workflow, in one snapshot) before it decides.
 */

/** A pipeline's rows as a run or a review needs them: the current plan (undefined before it is saved) and every attempt. */
export interface PipelineRows {
  plan: PlanRevision | undefined;
  attempts: StageAttempt[];
  /**
   * The attempt the review that returned these rows started in its
   * statement (`beginAfterTransition`): the run it launches runs it, where
   * any other run would take it for one cut off by a crash.
   */
  begun?: { stageId: string; attempt: number };
}

/**
 * The current plan and every attempt, in one statement (one round trip, one
 * snapshot): a run reads them before each stage, a review before it decides.
 */
export async function loadPipelineRows(db: DbOrTx, key: WorkflowKey): Promise<PipelineRows> {
  const result = await sql<PipelineRowsJson>`
    SELECT ${pipelineColumns(sql`${key.workflowId}`, key.tenantId)}`.execute(db);
  return pipelineRowsOf(result.rows[0]);
}

/**
 * A workflow with its pipeline's rows, in one statement: one snapshot, so
 * the rows are exactly those of the workflow's version (a review decides on
 * them and compares that version when it writes). Undefined when there is
 * no such workflow.
 */
export async function loadWorkflowWithPipeline(
  db: DbOrTx,
  key: WorkflowKey,
): Promise<{ workflow: WorkflowRow; pipeline: PipelineRows } | undefined> {
  const result = await sql<WorkflowRow & PipelineRowsJson>`
    SELECT w.*, ${pipelineColumns(sql`w.id`, key.tenantId)}
    FROM workflows w WHERE w.id = ${key.workflowId} AND w.tenant_id = ${key.tenantId}`.execute(db);
  const row = result.rows[0];
  if (!row) return undefined;
  const { pipeline_plan: plan, pipeline_attempts: attempts, ...workflow } = row;
  return {
    workflow,
    pipeline: pipelineRowsOf({ pipeline_plan: plan, pipeline_attempts: attempts }),
  };
}

/** The plan and attempt columns as json: timestamps as text, numerics as numbers. */
interface PipelineRowsJson {
  pipeline_plan: { revision: number; plan: unknown; created_at: string } | null;
  pipeline_attempts: Jsonified<Selectable<WorkflowStageAttemptsTable>>[];
}

type Jsonified<Row> = {
  [K in keyof Row]: Row[K] extends Date
    ? string
    : Row[K] extends Date | null
      ? string | null
      : Row[K];
};

function pipelineColumns(workflowId: ReturnType<typeof sql>, tenantId: string) {
  return sql`
    (SELECT json_build_object('revision', p.revision, 'plan', p.plan, 'created_at', p.created_at)
       FROM workflow_plans p WHERE p.workflow_id = ${workflowId} AND p.tenant_id = ${tenantId}
       ORDER BY p.revision DESC LIMIT 1) AS pipeline_plan,
    (SELECT coalesce(json_agg(a ORDER BY a.stage_id, a.attempt), '[]')
       FROM workflow_stage_attempts a WHERE a.workflow_id = ${workflowId} AND a.tenant_id = ${tenantId})
       AS pipeline_attempts`;
}

function pipelineRowsOf(row: PipelineRowsJson | undefined): PipelineRows {
  const plan = row?.pipeline_plan ?? null;
  const date = (text: string | null) => (text === null ? null : new Date(text));
  return {
    plan:
      plan === null
        ? undefined
        : { revision: plan.revision, plan: plan.plan, createdAt: new Date(plan.created_at) },
    attempts: (row?.pipeline_attempts ?? []).map((attempt) =>
      toStageAttempt({
        ...attempt,
        cost_usd: String(attempt.cost_usd),
        created_at: new Date(attempt.created_at),
        accepted_at: date(attempt.accepted_at),
        started_at: date(attempt.started_at),
        finished_at: date(attempt.finished_at),
      }),
    ),
  };
}

/** The review CTEs (pipelines.ts `…AfterTransition`) a transition statement wrote. */
export type ReviewWrite = 'accepted' | 'begun' | 'revised';

/**
 * The rows a review's CTEs wrote, as `alsoSelect` columns of its
 * transition (workflows/transitions.ts): `also_attempts` and `also_plan`.
 */
export function reviewedRowsColumns(writes: ReviewWrite[]) {
  const attempts = writes.filter((write) => write !== 'revised');
  return [
    attempts.length > 0
      ? sql`(SELECT coalesce(json_agg(written ORDER BY written.stage_id, written.attempt), '[]')
          FROM (${sql.join(
            attempts.map((name) => sql`SELECT * FROM ${sql.raw(name)}`),
            sql` UNION ALL `,
          )}) AS written) AS also_attempts`
      : sql`'[]'::json AS also_attempts`,
    writes.includes('revised')
      ? sql`(SELECT json_build_object('revision', revised.revision, 'plan', revised.plan,
          'created_at', revised.created_at) FROM revised) AS also_plan`
      : sql`NULL::json AS also_plan`,
  ];
}

/**
 * The pipeline's rows after a review: `before` (read at the version the
 * review's transition compared, so nothing else changed them) with the rows
 * the review wrote (`reviewedRowsColumns`, as the transition returned them).
 */
export function pipelineAfterReview(
  before: PipelineRows,
  also: Record<string, unknown>,
): PipelineRows {
  const written = pipelineRowsOf({
    pipeline_plan: (also.plan ?? null) as PipelineRowsJson['pipeline_plan'],
    pipeline_attempts: (also.attempts ?? []) as PipelineRowsJson['pipeline_attempts'],
  });
  const key = (attempt: StageAttempt) => `${attempt.stageId}\u0000${attempt.attempt}`;
  const replaced = new Map(written.attempts.map((attempt) => [key(attempt), attempt]));
  const attempts = before.attempts.map((attempt) => replaced.get(key(attempt)) ?? attempt);
  const known = new Set(before.attempts.map(key));
  attempts.push(...written.attempts.filter((attempt) => !known.has(key(attempt))));
  // Of the review's writes, only `begun` starts an attempt.
  const begun = written.attempts.find((attempt) => attempt.status === 'started');
  return {
    plan: written.plan ?? before.plan,
    attempts,
    ...(begun && { begun: { stageId: begun.stageId, attempt: begun.attempt } }),
  };
}
