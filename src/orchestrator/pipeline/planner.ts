import { AppError } from '../../errors.js';
import type { LlmError } from '../../llm/errors.js';
import type { TokenCounts } from '../../llm/estimate-tokens.js';
import type { ModelRouter, RouterCall } from '../../llm/router/router.js';
import type { CallContext } from '../../llm/router/types.js';
import type { Message, ModelRequest, Usage } from '../../llm/types.js';
import type { WorkflowTracker } from '../../tracker/tracker.js';
import { addUsage, type CollectedText, collectText, usageDetail } from '../collect-text.js';
import { type ExecutionPlan, type PlanLimits, type PlanParse, parsePlan } from './plan.js';
import { plannerSystemPrompt, repairMessages } from './planner-prompt.js';
import { readJsonObject } from './read-json.js';

/**
 * The QueryPlanner: one model turn asked for the ExecutionPlan as JSON,
 * validated with the plan schema. Invalid output gets exactly one repair
 * turn that quotes the validation issues; a second invalid reply is a
 * PlanInvalidError. Model failures (after the router's own retries and
 * fallbacks) are the router's LlmError. Either failure is returned, not
 * thrown, with the usage of the turns made before it: they were paid for
 * whatever came of them, and the workflow's usage and budget count them.
 * Each turn is reported as it ends, as a tool-loop turn is: its `llm_call`
 * events (step `plan`) carry its usage, so a run stopped while it repairs
 * a plan (a cancel, a hand-over) leaves the first turn's usage in the
 * event log, where the cancel, or the run taking the workflow over, counts
 * it. A stopped run's turn reports nothing: `throwIfStopped` throws after
 * it, as the tool loop does after a turn.
 */

/** The step of the planning turns' `llm_call` events (and of the `plan` event). */
export const PLAN_STEP = 'plan';

export interface PlannerOptions {
  question: string;
  /** The session's history, before the question: what the question may refer to. */
  history: readonly Message[];
  router: Pick<ModelRouter, 'stream'>;
  /** Catalogue name of the model asked. */
  model: string;
  /** What a model's usage cost, in USD: each turn is priced at the model that answered it. */
  costOf: (model: string, usage: Usage) => number;
  limits: PlanLimits;
  /** The run's exact token counts, for the router's when it fits a planning turn's output to its model. */
  tokenCounts?: TokenCounts;
  /** The workflow's signal: cancelling the workflow cancels the planning turn. */
  signal: AbortSignal;
  context: CallContext;
  /** Retries and fallbacks, for the tracker's llm_retry / llm_fallback events. */
  onEvent?: RouterCall['onEvent'];
  /** Where each planning turn's `llm_call` events go. */
  tracker: Pick<WorkflowTracker, 'enqueue'>;
  /** Throws once the run was stopped: a stopped run reports no more turns. */
  throwIfStopped: () => void;
  /** Defaults to the model's configured maximum: a 200-stage plan is long. */
  maxOutputTokens?: number;
}

/** What the planning turns made used, whatever came of them. */
interface PlannerSpent {
  /** Every turn made together; undefined when the provider reported none. */
  usage: Usage | undefined;
  /** Every turn made, each at the prices of the model that answered it (a fallback's, say). */
  costUsd: number;
}

export type PlannerOutcome =
  | (PlannerSpent & {
      status: 'planned';
      plan: ExecutionPlan;
      /** True when the first reply was invalid and the repair turn fixed it. */
      repaired: boolean;
    })
  | (PlannerSpent & { status: 'failed'; error: PlanInvalidError | LlmError });

export class PlanInvalidError extends AppError {
  /** What the validation found in the repaired reply, as quoted to the model. */
  readonly issues: string[];

  constructor(issues: string[]) {
    super({
      code: 'plan_invalid',
      status: 502,
      userMessage:
        'The model did not produce a valid execution plan, even after one repair attempt',
      blame: 'provider',
      retryable: true,
    });
    this.name = 'PlanInvalidError';
    this.issues = issues;
  }
}

export async function planQuestion(options: PlannerOptions): Promise<PlannerOutcome> {
  const first = await askForPlan(options, [
    ...options.history,
    { role: 'user', content: options.question },
  ]);
  if (first.outcome.status !== 'replied') return failed([first], first.outcome.error);
  if (first.outcome.parse.ok) {
    return {
      status: 'planned',
      plan: first.outcome.parse.plan,
      repaired: false,
      ...spent([first]),
    };
  }
  const second = await askForPlan(
    options,
    [
      ...options.history,
      ...repairMessages(options.question, first.outcome.text, first.outcome.parse.issues),
    ],
    { repair: true },
  );
  const turns = [first, second];
  if (second.outcome.status !== 'replied') return failed(turns, second.outcome.error);
  if (second.outcome.parse.ok) {
    return { status: 'planned', plan: second.outcome.parse.plan, repaired: true, ...spent(turns) };
  }
  return failed(turns, new PlanInvalidError(second.outcome.parse.issues));
}

interface PlanTurn extends PlannerSpent {
  outcome:
    | { status: 'replied'; text: string; parse: PlanParse }
    | { status: 'failed'; error: LlmError };
}

function spent(turns: PlanTurn[]): PlannerSpent {
  return {
    usage: turns.reduce<Usage | undefined>((sum, turn) => addUsage(sum, turn.usage), undefined),
    costUsd: turns.reduce((sum, turn) => sum + turn.costUsd, 0),
  };
}

function failed(turns: PlanTurn[], error: PlanInvalidError | LlmError): PlannerOutcome {
  return { status: 'failed', error, ...spent(turns) };
}

async function askForPlan(
  options: PlannerOptions,
  messages: Message[],
  turn: { repair: boolean } = { repair: false },
): Promise<PlanTurn> {
  const request: ModelRequest = {
    system: plannerSystemPrompt(options.limits),
    messages,
    temperature: 0,
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
  };
  // The model asked first; the call's end names the one that answered.
  options.tracker.enqueue('llm_call', PLAN_STEP, 'started', {
    model: options.model,
    ...(turn.repair ? { repair: true } : {}),
  });
  const started = performance.now();
  const collected = await collectText(
    options.router,
    {
      model: options.model,
      request,
      tokenCounts: options.tokenCounts,
      signal: options.signal,
      context: options.context,
      ...(options.onEvent ? { onEvent: options.onEvent } : {}),
    },
    { costOf: options.costOf },
  );
  options.throwIfStopped();
  const { costUsd } = collected;
  reportTurnEnd(options, collected, { costUsd, elapsedMs: performance.now() - started });
  return {
    outcome: collected.error
      ? { status: 'failed', error: collected.error }
      : { status: 'replied', text: collected.text, parse: readPlan(collected, options.limits) },
    usage: collected.usage,
    costUsd,
  };
}

/** A planning turn's `llm_call` end, with its usage, as a tool-loop turn's (call-model.ts). */
function reportTurnEnd(
  options: PlannerOptions,
  collected: CollectedText,
  spent: { costUsd: number; elapsedMs: number },
): void {
  const { model, usage, error } = collected;
  const usageOfTurn = usage ? { usage: usageDetail(usage, spent.costUsd) } : {};
  options.tracker.enqueue(
    'llm_call',
    PLAN_STEP,
    error ? 'failed' : 'completed',
    error
      ? { model, error: { code: error.code, message: error.userMessage }, ...usageOfTurn }
      : { model, finishReason: collected.finishReason ?? null, ...usageOfTurn },
    spent.elapsedMs,
  );
}

function readPlan(collected: CollectedText, limits: PlanLimits): PlanParse {
  const json = readJsonObject(collected.text);
  if (!json.ok) {
    // A reply cut at the token limit is the likeliest cause of broken JSON; say so, or the repair repeats it.
    const cut =
      collected.finishReason === 'length'
        ? ' (the reply was cut off at the output token limit: use fewer or shorter stages)'
        : '';
    return { ok: false, issues: [`${json.problem}${cut}`] };
  }
  return parsePlan(json.value, limits);
}
