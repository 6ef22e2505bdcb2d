import {
  type AttemptError,
  type AttemptReason,
  INTERRUPTED,
  type StageAttempt,
} from '../../store/pipelines.js';
import type { ExecutionPlan, PlanStage } from './plan.js';

/**
 * What a pipeline does next, decided from persisted rows only (the plan and
 * its stage attempts), so a run resumed on any replica continues where the
 * last one stopped. Stages run in plan order; a stage is done when its
 * latest attempt completed (and, for a checkpoint, the user continued), or
 * failed and the user continued past it. A done stage is never run again.
 *
 * Call it when a run starts or resumes and after each persisted step: an
 * attempt still `started` at that point was cut off by a crash, and is run
 * again under the next number (`interruptedAttempt` says which row to fail
 * as interrupted first).
 */
export type NextAction =
  | RunStage
  /**
   * A checkpoint stage's result waits for continue / modify / retry
   * (awaiting_input, checkpoint); `latest` is the completed attempt under review.
   */
  | { kind: 'await_review'; stage: PlanStage; attempt: number; latest: StageAttempt }
  /** Validation retries are used up, or the model failed: the user decides (awaiting_input, stage_failed). */
  | {
      kind: 'stage_failed';
      stage: PlanStage;
      attempt: number;
      findings: string[];
      error: AttemptError | null;
    }
  /** Every stage is done: write the final answer. */
  | { kind: 'synthesize' };

export interface RunStage {
  kind: 'run_stage';
  stage: PlanStage;
  /** The number to start; a pending row (the user's retry / modify) already has it. */
  attempt: number;
  reason: AttemptReason;
  /** The latest `modify` feedback for this stage: it holds for retries after it too. */
  feedback: string | null;
  /** The validator's findings on the previous attempt, to quote in the stage prompt. */
  findings: string[];
  /** The stage's most recent result, shown when there is feedback or findings to act on. */
  previousResult: string | null;
  /** An attempt left `started` by a crashed run: fail it as interrupted before starting this one. */
  interruptedAttempt: number | null;
  /**
   * The attempt whose Idempotency-Keys this one's tool calls carry
   * (run-stage.ts): its own, or for one re-running an attempt a crash cut
   * off (`resumed`), that attempt's. A takeover repeats the calls the crash
   * may have made under their keys; a retry, a modify or a validation retry
   * does the work again, under keys of its own.
   */
  keyAttempt: number;
}

export interface PipelinePolicy {
  /** Automatic re-runs after a failed validation, before the workflow pauses with stage_failed. */
  maxValidationRetries: number;
}

/** Per stage: done, or the action it needs. */
export type StageProgress =
  | { kind: 'done'; latest: StageAttempt }
  | Exclude<NextAction, { kind: 'synthesize' }>;

export function nextAction(
  plan: ExecutionPlan,
  attempts: readonly StageAttempt[],
  policy: PipelinePolicy,
): NextAction {
  const byStage = attemptsByStage(attempts);
  for (const stage of plan.stages) {
    const progress = stageProgress(stage, byStage.get(stage.id) ?? [], policy);
    if (progress.kind !== 'done') return progress;
  }
  return { kind: 'synthesize' };
}

/** Attempts grouped by stage id, each list in attempt order. */
export function attemptsByStage(attempts: readonly StageAttempt[]): Map<string, StageAttempt[]> {
  const byStage = new Map<string, StageAttempt[]>();
  for (const attempt of attempts) {
    const list = byStage.get(attempt.stageId);
    if (list) list.push(attempt);
    else byStage.set(attempt.stageId, [attempt]);
  }
  for (const list of byStage.values()) list.sort((a, b) => a.attempt - b.attempt);
  return byStage;
}

/** `attempts`: this stage's, in attempt order. */
export function stageProgress(
  stage: PlanStage,
  attempts: readonly StageAttempt[],
  policy: PipelinePolicy,
): StageProgress {
  const latest = attempts.at(-1);
  if (!latest) return run(stage, attempts, { attempt: 1, reason: 'first', findings: [] });
  switch (latest.status) {
    case 'pending':
      // A user's retry or modify: the stage runs afresh, without the old findings.
      return run(stage, attempts, { attempt: latest.attempt, reason: latest.reason, findings: [] });
    case 'started':
      return run(stage, attempts, {
        attempt: latest.attempt + 1,
        reason: 'resumed',
        findings: openFindings(attempts),
        interruptedAttempt: latest.attempt,
      });
    case 'completed':
      if (stage.checkpoint && latest.acceptedAt === null) {
        return { kind: 'await_review', stage, attempt: latest.attempt, latest };
      }
      return { kind: 'done', latest };
    case 'failed':
      return afterFailure(stage, attempts, latest, policy);
  }
}

function afterFailure(
  stage: PlanStage,
  attempts: readonly StageAttempt[],
  latest: StageAttempt,
  policy: PipelinePolicy,
): StageProgress {
  if (latest.acceptedAt !== null) return { kind: 'done', latest };
  const next = latest.attempt + 1;
  if (latest.error?.code === INTERRUPTED) {
    return run(stage, attempts, {
      attempt: next,
      reason: 'resumed',
      findings: openFindings(attempts),
    });
  }
  const findings = latest.validation?.findings ?? [];
  if (latest.error === null && findings.length > 0) {
    if (validationFailuresSinceOrigin(attempts) <= policy.maxValidationRetries) {
      return run(stage, attempts, { attempt: next, reason: 'validation_retry', findings });
    }
  }
  return { kind: 'stage_failed', stage, attempt: latest.attempt, findings, error: latest.error };
}

function run(
  stage: PlanStage,
  attempts: readonly StageAttempt[],
  next: {
    attempt: number;
    reason: AttemptReason;
    findings: string[];
    interruptedAttempt?: number;
  },
): RunStage {
  const modified = attempts.findLast((attempt) => attempt.reason === 'user_modify');
  const feedback = modified?.feedback ?? null;
  const hasWork = feedback !== null || next.findings.length > 0;
  return {
    kind: 'run_stage',
    stage,
    attempt: next.attempt,
    reason: next.reason,
    feedback,
    findings: next.findings,
    previousResult: hasWork
      ? (attempts.findLast((attempt) => attempt.result !== null)?.result ?? null)
      : null,
    interruptedAttempt: next.interruptedAttempt ?? null,
    keyAttempt:
      next.reason === 'resumed'
        ? (attempts.findLast(
            (attempt) => attempt.attempt < next.attempt && attempt.reason !== 'resumed',
          )?.attempt ?? next.attempt)
        : next.attempt,
  };
}

/** The first run, or the user's latest retry / modify: validation retries count from there. */
const ORIGINS: readonly AttemptReason[] = ['first', 'user_retry', 'user_modify'];

function sinceOrigin(attempts: readonly StageAttempt[]): readonly StageAttempt[] {
  const origin = attempts.findLastIndex((attempt) => ORIGINS.includes(attempt.reason));
  return attempts.slice(Math.max(0, origin));
}

/** Interrupted attempts are the crash's doing, not the model's: they use up no retries. */
function validationFailuresSinceOrigin(attempts: readonly StageAttempt[]): number {
  return sinceOrigin(attempts).filter(
    (attempt) =>
      attempt.status === 'failed' && attempt.error === null && attempt.validation?.passed === false,
  ).length;
}

/** The findings a re-run after a crash still has to act on. */
function openFindings(attempts: readonly StageAttempt[]): string[] {
  const rejected = sinceOrigin(attempts).findLast(
    (attempt) => attempt.status === 'failed' && (attempt.validation?.findings.length ?? 0) > 0,
  );
  return rejected?.validation?.findings ?? [];
}

/**
 * The result each done stage passes on: its latest attempt's, for stages
 * whose latest attempt completed or was accepted, and for a checkpoint
 * stage whose completed result awaits review. Feed it to the stage and
 * synthesis prompts and to the validator's consistency check. Nothing runs
 * after a stage awaiting review but the synthesis a budget cap brings
 * forward, which writes the answer from every stage done, that one too.
 */
export function stageResults(
  plan: ExecutionPlan,
  attempts: readonly StageAttempt[],
  policy: PipelinePolicy,
): Map<string, string> {
  const byStage = attemptsByStage(attempts);
  const results = new Map<string, string>();
  for (const stage of plan.stages) {
    const progress = stageProgress(stage, byStage.get(stage.id) ?? [], policy);
    const latest =
      progress.kind === 'done' || progress.kind === 'await_review' ? progress.latest : undefined;
    if (latest?.result != null) results.set(stage.id, latest.result);
  }
  return results;
}
