import {
  type AttemptUsage,
  INTERRUPTED_ATTEMPT,
  pipelinesRepository,
  type StageAttempt,
} from '../../store/pipelines.js';
import type { NewEventRow } from '../../store/workflow-events.js';
import type { WorkflowTracker } from '../../tracker/tracker.js';
import { addUsage } from '../collect-text.js';
import type { LoopOutcome } from '../tool-loop/types.js';
import { type RunStage, stageResults } from './next-action.js';
import type { PipelineState } from './pipeline-view.js';
import type { PipelineRun, PipelineRunInput } from './run-pipeline.js';
import { buildStageInput } from './stage-prompt.js';
import { validateStageResult } from './validator.js';

/** One attempt of a stage: started, run as a tool loop, validated, and ended as a row and an event. */
export async function runStage(
  run: PipelineRun,
  state: PipelineState,
  action: RunStage,
  /** The attempt's row when the review that launched this run started it, with its event. */
  begun?: StageAttempt,
): Promise<{ reason: LoopOutcome['reason']; written: StageAttempt[] } | undefined> {
  const { input } = run;
  const { stage } = action;
  const written: StageAttempt[] = [];
  const keep = (row: StageAttempt | undefined) => {
    if (row) written.push(row);
  };
  const pipelines = pipelinesRepository(input.db);
  const key = {
    tenantId: input.context.tenantId,
    workflowId: input.context.workflowId,
    stageId: stage.id,
    heldBy: input.lease,
  };
  if (action.interruptedAttempt !== null) {
    keep(
      await pipelines.failAttempt({
        ...key,
        attempt: action.interruptedAttempt,
        error: INTERRUPTED_ATTEMPT,
      }),
    );
  }
  const detail = { stage: stage.id, title: stage.title, attempt: action.attempt };
  const startedRow = begun ?? (await startAttempt(run, state, action));
  // Started by another run meanwhile (its runner lost the lease to this
  // one): the next decision, from fresh rows, says what is left.
  if (!startedRow) return undefined;
  keep(startedRow);
  const started = performance.now();
  const earlierResults = stageResults(state.plan, state.attempts, run.policy);
  const stageInput = buildStageInput({
    base: input.system,
    question: input.context.input,
    history: input.context.history,
    plan: state.plan,
    stage,
    earlierResults,
    feedback: action.feedback,
    findings: action.findings,
    previousResult: action.previousResult,
    resultMaxChars: input.settings.stageResultMaxChars,
  });
  const outcome = await input.runStage({
    ...stageInput,
    tools: stage.tools,
    tracker: stageTracker(input, stage.id),
    callStepPrefix: `${stage.id}/attempt-${action.keyAttempt}/`,
    spentBefore: spentSoFar(run),
  });
  input.throwIfStopped();
  run.usage = addUsage(run.usage, outcome.usage);
  run.costUsd += outcome.costUsd;
  const usage = attemptUsage(outcome);
  const elapsedMs = performance.now() - started;
  if (outcome.failure) {
    keep(
      await pipelines.failAttempt({
        ...key,
        attempt: action.attempt,
        result: outcome.answer || undefined,
        error: outcome.failure,
        usage,
      }),
    );
    input.context.tracker.enqueue(
      'stage',
      stage.id,
      'failed',
      { ...detail, error: outcome.failure },
      elapsedMs,
    );
    return { reason: outcome.reason, written };
  }
  const validation = validateStageResult({
    stage,
    result: outcome.answer,
    earlierResults,
    plan: state.plan,
  });
  const ended = { ...key, attempt: action.attempt, result: outcome.answer, validation, usage };
  keep(
    validation.passed ? await pipelines.completeAttempt(ended) : await pipelines.failAttempt(ended),
  );
  input.context.tracker.enqueue(
    'stage',
    stage.id,
    validation.passed ? 'completed' : 'failed',
    { ...detail, validation },
    elapsedMs,
  );
  return { reason: outcome.reason, written };
}

/** The event an attempt starts with; a review that begins the attempt writes it (review.ts). */
export function stageStartedEvent(action: Pick<RunStage, 'stage' | 'attempt' | 'reason'>) {
  return {
    type: 'stage' as const,
    step: action.stage.id,
    status: 'started' as const,
    detail: {
      stage: action.stage.id,
      title: action.stage.title,
      attempt: action.attempt,
      reason: action.reason,
    },
    elapsedMs: null,
  } satisfies NewEventRow;
}

/**
 * Starts the attempt, with its event; undefined when it exists and was
 * started already. The event is written while the attempt row is, not after
 * it: a client watching the stream sees the stage start one round trip sooner.
 * Each is made only while the run holds the lease, so a run that lost it
 * writes neither; a takeover between the two is a crash between them,
 * which the run taking over handles (it fails the attempt as interrupted).
 */
async function startAttempt(
  run: PipelineRun,
  state: PipelineState,
  action: RunStage,
): Promise<StageAttempt | undefined> {
  const { input } = run;
  const started = stageStartedEvent(action);
  const [row] = await Promise.all([
    pipelinesRepository(input.db).startAttempt({
      tenantId: input.context.tenantId,
      workflowId: input.context.workflowId,
      stageId: action.stage.id,
      heldBy: input.lease,
      attempt: action.attempt,
      planRevision: state.revision,
      reason: action.reason,
      feedback: action.feedback,
    }),
    input.context.tracker.emit(started.type, started.step, started.status, started.detail),
  ]);
  return row;
}

/** The stage loop's events carry the stage in their step: `<stage>/turn-2`. */
function stageTracker(
  input: PipelineRunInput,
  stageId: string,
): Pick<WorkflowTracker, 'enqueue' | 'token'> {
  return {
    enqueue: (type, step, status, detail, elapsedMs) =>
      input.context.tracker.enqueue(
        type,
        step ? `${stageId}/${step}` : stageId,
        status,
        detail,
        elapsedMs,
      ),
    token: () => undefined,
  };
}

/** The workflow's spending before this run, and this run's so far: what budgets count. */
export function spentSoFar(run: PipelineRun): { tokens: number; costUsd: number } {
  const before = run.input.context.spentBefore;
  return {
    tokens: before.tokens + (run.usage ? run.usage.inputTokens + run.usage.outputTokens : 0),
    costUsd: before.costUsd + run.costUsd,
  };
}

/** A stage attempt's tokens and cost, as its tool loop counted them. */
function attemptUsage(stage: LoopOutcome): AttemptUsage | undefined {
  if (!stage.usage) return undefined;
  return {
    inputTokens: stage.usage.inputTokens,
    outputTokens: stage.usage.outputTokens,
    cachedInputTokens: stage.usage.cachedInputTokens,
    costUsd: stage.costUsd,
  };
}
