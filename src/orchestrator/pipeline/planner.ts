import { AppError } from '../../errors.js';
import type { ModelRouter, RouterCall } from '../../llm/router/router.js';
import type { CallContext } from '../../llm/router/types.js';
import type { Message, ModelRequest, Usage } from '../../llm/types.js';
import { addUsage, type CollectedText, collectText } from '../collect-text.js';
import { type ExecutionPlan, type PlanLimits, type PlanParse, parsePlan } from './plan.js';
import { plannerSystemPrompt, repairMessages } from './planner-prompt.js';
import { readJsonObject } from './read-json.js';

/**
 * The QueryPlanner: one model turn asked for the ExecutionPlan as JSON,
 * validated with the plan schema. Invalid output gets exactly one repair
 * turn that quotes the validation issues; a second invalid reply is a
 * PlanInvalidError. Model failures (after the router's own retries and
 * fallbacks) are thrown as the router's LlmError.
 */

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
  /** The workflow's signal: cancelling the workflow cancels the planning turn. */
  signal: AbortSignal;
  context: CallContext;
  /** Retries and fallbacks, for the tracker's llm_retry / llm_fallback events. */
  onEvent?: RouterCall['onEvent'];
  /** Defaults to the model's configured maximum: a 200-stage plan is long. */
  maxOutputTokens?: number;
}

export interface PlannerOutcome {
  plan: ExecutionPlan;
  /** True when the first reply was invalid and the repair turn fixed it. */
  repaired: boolean;
  /** Both turns together; undefined when the provider reported none. */
  usage: Usage | undefined;
  /** Both turns, each at the prices of the model that answered it (a fallback's, say). */
  costUsd: number;
}

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
  if (first.parse.ok) {
    return { plan: first.parse.plan, repaired: false, usage: first.usage, costUsd: first.costUsd };
  }
  const second = await askForPlan(options, [
    ...options.history,
    ...repairMessages(options.question, first.text, first.parse.issues),
  ]);
  const usage = addUsage(first.usage, second.usage);
  const costUsd = first.costUsd + second.costUsd;
  if (second.parse.ok) return { plan: second.parse.plan, repaired: true, usage, costUsd };
  throw new PlanInvalidError(second.parse.issues);
}

interface PlanTurn {
  text: string;
  parse: PlanParse;
  usage: Usage | undefined;
  costUsd: number;
}

async function askForPlan(options: PlannerOptions, messages: Message[]): Promise<PlanTurn> {
  const request: ModelRequest = {
    system: plannerSystemPrompt(options.limits),
    messages,
    temperature: 0,
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
  };
  const collected = await collectText(options.router, {
    model: options.model,
    request,
    signal: options.signal,
    context: options.context,
    ...(options.onEvent ? { onEvent: options.onEvent } : {}),
  });
  return {
    text: collected.text,
    parse: readPlan(collected, options.limits),
    usage: collected.usage,
    costUsd: collected.usage ? options.costOf(collected.model, collected.usage) : 0,
  };
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
