import type { TokenCounts } from '../../llm/estimate-tokens.js';
import type { ModelRouter, RouterCall } from '../../llm/router/router.js';
import type { Message, SystemPrompt, Usage } from '../../llm/types.js';
import type { Db } from '../../store/database.js';
import type { PipelineRows } from '../../store/pipeline-rows.js';
import { pipelinesRepository, type StageAttempt } from '../../store/pipelines.js';
import type { NewEventRow } from '../../store/workflow-events.js';
import type { WorkflowTracker } from '../../tracker/tracker.js';
import type { AgentContext } from '../agent-context.js';
import type { LoopOutcome, Spent } from '../tool-loop/types.js';
import { type NextAction, nextAction, type PipelinePolicy } from './next-action.js';
import { loadPipelineState, type PipelineState, pipelineStateOf } from './pipeline-view.js';
import { type PlanLimits, type PlanStage, planEventDetail, toStoredPlan } from './plan.js';
import { PLAN_STEP, planQuestion } from './planner.js';
import { runStage } from './run-stage.js';
import { announceSpentCap, type SpentCap, spentCapOf } from './spent-cap.js';
import { outcome, paused, spend, synthesize } from './synthesize.js';

/**
 * The complex path of one workflow run: plan (once), then each stage as a
 * sub-agent tool loop checked by the validator, pausing at checkpoints and
 * when a stage's retries are used up, then one streamed synthesis. Every
 * decision is taken from persisted rows (next-action.ts), so a run resumed
 * on any replica, after a crash or a `continue`, goes on from the last
 * persisted stage and never runs a completed one again.
 */

export interface PipelineSettings {
  maxStages: number;
  /** Automatic re-runs of a stage whose result fails validation. */
  maxValidationRetries: number;
  /** Each earlier stage result quoted in a stage prompt is cut to this. */
  stageResultMaxChars: number;
  /** Each stage result quoted in the synthesis prompt is cut to this. */
  synthesisResultMaxChars: number;
}

/** A pause of the pipeline: the status change and the event the client acts on. */
export interface PipelinePause {
  reason: 'checkpoint' | 'stage_failed' | 'synthesis_failed';
  event: NewEventRow;
  /** This run's usage, recorded with the pause (which ends the run). */
  spent: Spent;
}

/** A stage's sub-agent run: the tool loop with the stage's prompt, and events under the stage's step. */
export type RunStageLoop = (input: {
  system: SystemPrompt;
  messages: Message[];
  /** The stage's `tools`: the only ones it is offered; every one the plan may name when undefined. */
  tools: readonly string[] | undefined;
  tracker: Pick<WorkflowTracker, 'enqueue' | 'token'>;
  /** `<stage>/attempt-<k>/`: see LoopOptions. */
  callStepPrefix: string;
  /** What the workflow spent before this stage, counted against its budget. */
  spentBefore: { tokens: number; costUsd: number };
}) => Promise<LoopOutcome>;

export interface PipelineRunInput {
  db: Db;
  /**
   * The run's lease owner (Run's `lease`): its plan and stage attempts are
   * written only while it holds the workflow's lease (store/pipelines.ts).
   */
  lease: string;
  /** The rows to start from, when the review that launched the run returned them; read otherwise. */
  rows?: PipelineRows;
  context: AgentContext;
  settings: PipelineSettings;
  router: Pick<ModelRouter, 'stream'>;
  /**
   * The run's exact token counts, shared with its stages' tool loops: the
   * router's, when it fits the planner's and the synthesis's output to the
   * model of an attempt (llm/output-room.ts), reuse them.
   */
  tokenCounts?: TokenCounts;
  /** The workflow's system prompt with its tools, the base of the stage prompts. */
  system: SystemPrompt;
  /** The tools a plan may name for a stage. */
  toolNames: string[];
  onRouterEvent: NonNullable<RouterCall['onEvent']>;
  throwIfStopped: () => void;
  /** What a model's usage cost, in USD: each turn's at the model that answered it. */
  costOf: (model: string, usage: Usage) => number;
  runStage: RunStageLoop;
  pause: (pause: PipelinePause) => Promise<void>;
}

/** The state of one pipeline run; never shared. */
export interface PipelineRun {
  readonly input: PipelineRunInput;
  readonly policy: PipelinePolicy;
  usage: Usage | undefined;
  /** Each turn priced with the model that answered it. */
  costUsd: number;
  /** The cap a `warning` has named already (spent-cap.ts). */
  announcedCap: SpentCap | null;
}

export async function runPipeline(input: PipelineRunInput): Promise<LoopOutcome> {
  const run: PipelineRun = {
    input,
    policy: { maxValidationRetries: input.settings.maxValidationRetries },
    usage: undefined,
    costUsd: 0,
    announcedCap: null,
  };
  const key = { tenantId: input.context.tenantId, workflowId: input.context.workflowId };
  let state = input.rows ? pipelineStateOf(input.rows) : await loadPipelineState(input.db, key);
  if (!state) {
    const planned = await plan(run);
    if ('failure' in planned) return planned.failure;
    state = planned.state;
  } else {
    // Once the plan exists, the run that reaches a cap names it (here, in a
    // stage's tool loop, or with a failed synthesis's pause): one that
    // earlier runs' spending reached was named by them. Read from the
    // workflow's usage, so a retried synthesis does not name it again.
    run.announcedCap = spentCapOf(input.context.budget, input.context.spentBefore);
  }
  // The attempt the review that launched this run started: this run's to
  // run, where any other run would fail it as cut off by a crash.
  let begun = input.rows?.begun;
  for (;;) {
    input.throwIfStopped();
    // An attempt a review began is the stage's to run: its loop checks the budget before each turn.
    // A cap reached (by the planner's turns, a stage's last turn, a run before a crash) ends the
    // pipeline: nothing more runs or pauses. Iterations are capped per stage, by its tool loop.
    const spentCap = begun
      ? null
      : announceSpentCap(run, 'writing the answer from the stages done so far.');
    if (spentCap) return synthesize(run, state, spentCap);
    const decided = begun ? decideBegun(state, begun, run.policy) : undefined;
    begun = undefined;
    const action = decided?.action ?? nextAction(state.plan, state.attempts, run.policy);
    switch (action.kind) {
      case 'run_stage': {
        const ran = await runStage(run, state, action, decided?.row);
        // The rows the attempt wrote, kept in memory: a stage costs no re-read
        // of the whole pipeline. An attempt another run started means the
        // rows changed under us: read them again.
        state = ran
          ? withAttempts(state, ran.written)
          : ((await loadPipelineState(input.db, key)) ?? state);
        // A spent budget ends the pipeline: the answer is written from the stages done so far.
        if (ran?.reason === 'token_budget' || ran?.reason === 'cost_budget') {
          // The stage's tool loop named the cap when it reached it.
          run.announcedCap = ran.reason;
          return synthesize(run, state, ran.reason);
        }
        // Spent by the stage's last turn, which no check follows within the stage: the next
        // pass, before anything else runs or pauses.
        break;
      }
      case 'await_review':
        await pauseAt(run, 'checkpoint', {
          type: 'checkpoint',
          stage: action.stage,
          detail: {
            attempt: action.attempt,
            result: action.latest.result,
            planRevision: state.revision,
          },
        });
        return paused(run);
      case 'stage_failed':
        await pauseAt(run, 'stage_failed', {
          type: 'stage',
          stage: action.stage,
          detail: {
            attempt: action.attempt,
            validation: { passed: false, findings: action.findings },
            error: action.error,
          },
        });
        return paused(run);
      case 'synthesize':
        return synthesize(run, state);
      default:
        return assertNever(action);
    }
  }
}

/**
 * The decision the review took when it began `begun` (review.ts
 * `beginNext`): the one taken on the rows with that attempt not started
 * yet, which runs it. Undefined when the rows say otherwise; the run then
 * decides like every other run (and takes the attempt for one cut off).
 */
function decideBegun(
  state: PipelineState,
  begun: { stageId: string; attempt: number },
  policy: PipelinePolicy,
): { action: NextAction; row: StageAttempt } | undefined {
  const row = state.attempts.find(
    (attempt) => attempt.stageId === begun.stageId && attempt.attempt === begun.attempt,
  );
  if (row?.status !== 'started') return undefined;
  const notStarted = state.attempts.map((attempt) =>
    attempt === row ? { ...row, status: 'pending' as const } : attempt,
  );
  const action = nextAction(state.plan, notStarted, policy);
  const runsIt =
    action.kind === 'run_stage' &&
    action.stage.id === row.stageId &&
    action.attempt === row.attempt;
  return runsIt ? { action, row } : undefined;
}

/** The state with attempt rows written by this run replacing (or adding to) the ones it had. */
function withAttempts(state: PipelineState, written: StageAttempt[]): PipelineState {
  const keyOf = (attempt: StageAttempt) => `${attempt.stageId}\u0000${attempt.attempt}`;
  const byKey = new Map(state.attempts.map((attempt) => [keyOf(attempt), attempt]));
  for (const attempt of written) byKey.set(keyOf(attempt), attempt);
  return { ...state, attempts: [...byKey.values()] };
}

/** Pauses the workflow on a stage, with the event the user acts on and this run's usage. */
function pauseAt(
  run: PipelineRun,
  reason: PipelinePause['reason'],
  on: { type: 'checkpoint' | 'stage'; stage: PlanStage; detail: Record<string, unknown> },
): Promise<void> {
  return run.input.pause({
    reason,
    spent: { usage: run.usage, costUsd: run.costUsd },
    event: {
      type: on.type,
      step: on.stage.id,
      status: 'paused',
      detail: { stage: on.stage.id, title: on.stage.title, ...on.detail },
      elapsedMs: null,
    },
  });
}

/** The planner's plan, persisted as revision 1 and announced with a `plan` event. */
async function plan(
  run: PipelineRun,
): Promise<{ state: PipelineState } | { failure: LoopOutcome }> {
  const { input } = run;
  const limits: PlanLimits = { maxStages: input.settings.maxStages, toolNames: input.toolNames };
  const started = performance.now();
  const planned = await planQuestion({
    question: input.context.input,
    history: input.context.history,
    router: input.router,
    model: input.context.model,
    costOf: input.costOf,
    limits,
    tokenCounts: input.tokenCounts,
    signal: input.context.signal,
    context: { tenantId: input.context.tenantId, workflowId: input.context.workflowId },
    onEvent: input.onRouterEvent,
    tracker: input.context.tracker,
    throwIfStopped: input.throwIfStopped,
  });
  // Every planning turn was paid for, whatever came of it: a failed plan's count too.
  // Each turn's llm_call carries its usage; the plan event does not repeat it.
  spend(run, planned.usage, planned.costUsd);
  input.throwIfStopped();
  if (planned.status === 'failed') {
    const failure = { code: planned.error.code, message: planned.error.userMessage };
    input.context.tracker.enqueue(
      'plan',
      PLAN_STEP,
      'failed',
      { error: failure },
      performance.now() - started,
    );
    return { failure: outcome(run, { answer: '', reason: 'model_error', failure }) };
  }
  const revision = await pipelinesRepository(input.db).savePlan({
    tenantId: input.context.tenantId,
    workflowId: input.context.workflowId,
    heldBy: input.lease,
    plan: toStoredPlan(planned.plan),
  });
  input.context.tracker.enqueue(
    'plan',
    PLAN_STEP,
    'completed',
    { ...planEventDetail(revision, planned.plan, 'planner'), repaired: planned.repaired },
    performance.now() - started,
  );
  return { state: { revision, plan: planned.plan, attempts: [] } };
}

function assertNever(value: never): never {
  throw new Error(`unexpected pipeline action: ${JSON.stringify(value)}`);
}
