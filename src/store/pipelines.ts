import { type Selectable, sql } from 'kysely';
import { z } from 'zod';
import { type DbOrTx, WITHOUT_FLUSH_WAIT } from './database.js';
import { type HeldBy, heldWorkflow, refusalOf } from './held-lease.js';
import {
  acceptAfterTransition,
  type BegunAttempt,
  beginAfterTransition,
  elapsedMsSince,
  workflowAsChanged,
} from './pipeline-transition-writes.js';
import type { WorkflowStageAttemptsTable } from './schema.js';

/**
 * The pipeline's rows: plan revisions (`workflow_plans`) and stage attempts
 * (`workflow_stage_attempts`). Every query is scoped by tenant. A stage run
 * costs two round trips, one write when the attempt starts and one when it
 * ends, each touching one row: the cost of a stage does not grow with the
 * plan or with the stages before it.
 *
 * The plan is stored as the caller gives it (versioned JSON, parsed by
 * src/orchestrator/pipeline/plan.ts): the store knows rows, not plans.
 *
 * A run's writes (a plan, an attempt's start and end) name the run's lease
 * owner (`heldBy`, Run's `lease`): they are made only while it holds the
 * workflow's lease, else refused with LeaseLostError, as its events and
 * transitions are (held-lease.ts). A run stalled past its lease whose
 * workflow was taken over must not leave a plan or a stage result the new
 * run would build on.
 */

export const ATTEMPT_STATUSES = ['pending', 'started', 'completed', 'failed'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

/** Why an attempt runs; see migrations/0009_pipelines.sql. */
export const ATTEMPT_REASONS = [
  'first',
  'validation_retry',
  'user_retry',
  'user_modify',
  'resumed',
] as const;
export type AttemptReason = (typeof ATTEMPT_REASONS)[number];

export interface WorkflowKey {
  tenantId: string;
  workflowId: string;
}

export interface AttemptKey extends WorkflowKey {
  stageId: string;
  attempt: number;
}

export interface StageValidationRecord {
  passed: boolean;
  findings: string[];
}

/** A failure other than validation: the model failed, or the attempt was cut off (`interrupted`). */
export interface AttemptError {
  code: string;
  message: string;
}

export interface AttemptUsage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costUsd: number;
}

export interface StageAttempt {
  stageId: string;
  attempt: number;
  planRevision: number;
  status: AttemptStatus;
  reason: AttemptReason;
  feedback: string | null;
  result: string | null;
  validation: StageValidationRecord | null;
  error: AttemptError | null;
  usage: AttemptUsage;
  /** Set when the user continued past this attempt's outcome. */
  acceptedAt: Date | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  elapsedMs: number | null;
}

export interface PlanRevision {
  revision: number;
  /** As saved: versioned JSON for the orchestrator to parse. */
  plan: unknown;
  createdAt: Date;
}

interface AttemptOutcome {
  status: 'completed' | 'failed';
  result?: string | null;
  validation?: StageValidationRecord | null;
  error?: AttemptError | null;
  usage?: AttemptUsage;
}

/** The code of the error an attempt cut off by a crash is failed with. */
export const INTERRUPTED = 'interrupted';

/** The error of an attempt cut off by a crash, as the run that takes the workflow over fails it. */
export const INTERRUPTED_ATTEMPT: Readonly<AttemptError> = {
  code: INTERRUPTED,
  message: 'The run was cut off during this attempt',
};

const validationV1 = z.object({
  schemaVersion: z.literal(1),
  passed: z.boolean(),
  findings: z.array(z.string()),
});
const attemptError = z.object({ code: z.string(), message: z.string() });
// Built once: every attempt read parses its row with them.
const attemptStatus = z.enum(ATTEMPT_STATUSES);
const attemptReason = z.enum(ATTEMPT_REASONS);

/** An attempt's usage before it has run. */
export const ZERO_USAGE: Readonly<AttemptUsage> = {
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  costUsd: 0,
};

export function pipelinesRepository(db: DbOrTx) {
  /**
   * The one update that ends an attempt; only a started one, so an attempt
   * ends once. Undefined when it is not started (any more); a run
   * (`heldBy`) finding it ended because it lost the lease, or the workflow
   * ended, is told so (refusalOf).
   */
  async function finish(
    key: AttemptKey & HeldBy,
    outcome: AttemptOutcome,
  ): Promise<StageAttempt | undefined> {
    const usage = usageColumns(outcome.usage);
    const ended = await sql<Selectable<WorkflowStageAttemptsTable>>`
      WITH ${heldWorkflow(key)}
      UPDATE workflow_stage_attempts AS a SET
        status = ${outcome.status},
        result = ${outcome.result ?? null},
        validation = ${outcome.validation ? validationJson(outcome.validation) : null}::jsonb,
        error = ${outcome.error ? JSON.stringify(outcome.error) : null}::jsonb,
        input_tokens = ${usage.input_tokens},
        output_tokens = ${usage.output_tokens},
        cached_input_tokens = ${usage.cached_input_tokens},
        cost_usd = ${usage.cost_usd},
        -- Timed by the database clock its started_at came from.
        finished_at = clock_timestamp(),
        elapsed_ms = ${elapsedMsSince(sql.ref('a.started_at'))}
      FROM held
      WHERE a.workflow_id = held.id AND a.tenant_id = held.tenant_id
        AND a.stage_id = ${key.stageId} AND a.attempt = ${key.attempt}
        AND a.status = 'started'
      RETURNING a.*`.execute(db);
    const row = ended.rows[0];
    if (row) return toStageAttempt(row);
    const refused = await refusalOf(db, key);
    if (refused) throw refused;
    return undefined;
  }

  return {
    /**
     * Appends the next plan revision (1 for the planner's plan) and returns
     * its number; only while the run (`heldBy`) holds the lease.
     */
    async savePlan(input: WorkflowKey & HeldBy & { plan: object }): Promise<number> {
      const saved = await sql<{ revision: number }>`
        WITH ${heldWorkflow(input)}
        INSERT INTO workflow_plans (workflow_id, revision, tenant_id, plan)
        SELECT held.id,
               coalesce((SELECT max(p.revision) FROM workflow_plans p
                 WHERE p.workflow_id = held.id AND p.tenant_id = held.tenant_id), 0) + 1,
               held.tenant_id, ${JSON.stringify(input.plan)}::jsonb
        FROM held
        RETURNING revision`.execute(db);
      const row = saved.rows[0];
      if (row) return row.revision;
      throw (await refusalOf(db, input)) ?? new Error('saving the plan returned no revision');
    },

    /**
     * Starts an attempt: inserts it, or starts the pending row a user's
     * retry / modify left under that number (reviews wrote those before
     * they began the attempt themselves, `beginAfterTransition`; a workflow
     * reviewed then and not yet resumed may still have one). `feedback` is
     * what the attempt runs with (next-action.ts carries a modify's
     * feedback forward).
     * Undefined when the attempt exists and is not pending (another run
     * started it, so this one must not run the stage a second time), or
     * when the tenant has no such workflow. A finished workflow starts
     * nothing (409 `workflow_finished`): the statement holds a share lock
     * on the workflow row, so a cancel either comes after it, and fails the
     * attempt with the workflow, or before it, and the attempt is not
     * written (a row left `started` on a cancelled workflow would show its
     * stage running forever). The same lock orders it with a takeover: the
     * start is written only while the run (`heldBy`) holds the lease
     * (LeaseLostError otherwise; see heldWorkflow).
     */
    async startAttempt(
      input: AttemptKey &
        HeldBy & { planRevision: number; reason: AttemptReason; feedback: string | null },
    ): Promise<StageAttempt | undefined> {
      // Not waiting for the WAL flush: a start lost to a PostgreSQL crash
      // only means the stage starts again (how it ends is written durably).
      const started = await sql<Selectable<WorkflowStageAttemptsTable>>`
        WITH ${heldWorkflow(input, { unfinished: true })}
        INSERT INTO workflow_stage_attempts AS a
          (workflow_id, stage_id, attempt, tenant_id, plan_revision, status, reason, feedback, started_at)
        SELECT held.id, ${input.stageId}, ${input.attempt}, held.tenant_id, ${input.planRevision},
               'started', ${input.reason}, ${input.feedback}, clock_timestamp()
        FROM held, ${WITHOUT_FLUSH_WAIT}
        ON CONFLICT (workflow_id, stage_id, attempt) DO UPDATE SET
          status = 'started',
          plan_revision = excluded.plan_revision,
          feedback = excluded.feedback,
          started_at = excluded.started_at
        WHERE a.status = 'pending' AND a.tenant_id = ${input.tenantId}
        RETURNING a.*`.execute(db);
      const row = started.rows[0];
      if (row) return toStageAttempt(row);
      const refused = await refusalOf(db, input);
      if (refused) throw refused;
      return undefined;
    },

    /** Ends a started attempt whose result passed validation; undefined when it is not started (any more). */
    async completeAttempt(
      input: AttemptKey &
        HeldBy & {
          result: string;
          validation: StageValidationRecord;
          usage?: AttemptUsage;
        },
    ): Promise<StageAttempt | undefined> {
      return finish(input, { status: 'completed', ...input, error: null });
    },

    /**
     * Ends a started attempt as failed: by validation (result and findings),
     * by an error, or as `interrupted` when a resumed run finds it cut off.
     */
    async failAttempt(
      input: AttemptKey &
        HeldBy & {
          result?: string | null;
          validation?: StageValidationRecord | null;
          error?: AttemptError | null;
          usage?: AttemptUsage;
        },
    ): Promise<StageAttempt | undefined> {
      return finish(input, { status: 'failed', ...input });
    },

    /**
     * Starts a stage's attempt as a review does (`beginAfterTransition`),
     * on its own; undefined when the workflow does not exist.
     */
    async beginAttempt(input: WorkflowKey & BegunAttempt): Promise<StageAttempt | undefined> {
      const inserted = await sql<Selectable<WorkflowStageAttemptsTable>>`
        WITH ${workflowAsChanged(input)}, ${beginAfterTransition(input)}
        SELECT * FROM begun`.execute(db);
      const row = inserted.rows[0];
      return row && toStageAttempt(row);
    },

    /** The attempts of these stages (all their numbers), for reading a few rows rather than the pipeline's. */
    async attemptsOfStages(key: WorkflowKey, stageIds: string[]): Promise<StageAttempt[]> {
      if (stageIds.length === 0) return [];
      const rows = await db
        .selectFrom('workflow_stage_attempts')
        .selectAll()
        .where('tenant_id', '=', key.tenantId)
        .where('workflow_id', '=', key.workflowId)
        .where('stage_id', 'in', stageIds)
        .execute();
      return rows.map(toStageAttempt);
    },

    /**
     * Records the user's `continue` on a finished attempt; false when it is
     * not finished or was accepted already. The review writes it with its
     * transition (`acceptAfterTransition`); this is the same write on its own.
     */
    async acceptAttempt(input: AttemptKey): Promise<boolean> {
      const accepted = await sql`
        WITH ${workflowAsChanged(input)}, ${acceptAfterTransition(input)}
        SELECT * FROM accepted`.execute(db);
      return accepted.rows.length > 0;
    },
  };
}

export type PipelinesRepository = ReturnType<typeof pipelinesRepository>;

function validationJson(validation: StageValidationRecord): string {
  return JSON.stringify({ schemaVersion: 1, ...validation });
}

function usageColumns(usage: AttemptUsage = ZERO_USAGE) {
  return {
    input_tokens: usage.inputTokens,
    output_tokens: usage.outputTokens,
    cached_input_tokens: usage.cachedInputTokens,
    cost_usd: usage.costUsd,
  };
}

/** A stage-attempt row as the orchestrator reads it (validated JSON, numbers). */
export function toStageAttempt(row: Selectable<WorkflowStageAttemptsTable>): StageAttempt {
  const validation = row.validation === null ? null : validationV1.parse(row.validation);
  return {
    stageId: row.stage_id,
    attempt: row.attempt,
    planRevision: row.plan_revision,
    status: attemptStatus.parse(row.status),
    reason: attemptReason.parse(row.reason),
    feedback: row.feedback,
    result: row.result,
    validation: validation && { passed: validation.passed, findings: validation.findings },
    error: row.error === null ? null : attemptError.parse(row.error),
    usage: {
      inputTokens: row.input_tokens,
      outputTokens: row.output_tokens,
      cachedInputTokens: row.cached_input_tokens,
      costUsd: Number(row.cost_usd),
    },
    acceptedAt: row.accepted_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    elapsedMs: row.elapsed_ms,
  };
}
