import { storableText } from '../json-limits.js';
import type { LlmError } from '../llm/errors.js';
import type { ModelRouter, RouterCall } from '../llm/router/router.js';
import type { FinishReason, Usage } from '../llm/types.js';
import type { WorkflowUsage } from '../workflows/types.js';

/** A whole text-only turn: what one-off model calls (classification check, planner) need. */
export interface CollectedText {
  text: string;
  /** Catalogue name of the model that answered: another than the one asked after a fallback. */
  model: string;
  /** Every attempt's that reported usage, a failed one's too (RouterStream); undefined when none did. */
  usage: Usage | undefined;
  /** Each attempt's usage at the prices of its model. */
  costUsd: number;
  finishReason: FinishReason | undefined;
  /** The router's error when the turn failed for good (after its retries and fallbacks). */
  error: LlmError | undefined;
}

/**
 * A model call's usage and price as its event carries it (`llm_call`,
 * `classification`): what a run taking a workflow over counts of the calls a run cut
 * off never added to the workflow's usage (store/workflow-events.ts
 * `uncountedUsage`).
 */
export function usageDetail(usage: Usage, costUsd: number): WorkflowUsage {
  return {
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    cachedInputTokens: usage.cachedInputTokens,
    costUsd,
  };
}

/** The usage of several turns together; undefined while no turn reported any. */
export function addUsage(total: Usage | undefined, usage: Usage | undefined): Usage | undefined {
  if (!usage) return total;
  if (!total) return { ...usage };
  return {
    inputTokens: total.inputTokens + usage.inputTokens,
    outputTokens: total.outputTokens + usage.outputTokens,
    cachedInputTokens: total.cachedInputTokens + usage.cachedInputTokens,
    cacheWriteTokens: total.cacheWriteTokens + usage.cacheWriteTokens,
  };
}

/**
 * Why the text of a workflow's answering turn (the tool loop's last, or the
 * pipeline's synthesis) is no answer: a workflow never completes with an
 * empty one, which a client would show as an answer. A provider's content
 * filter ends a turn with no text and says so in its finish reason; else
 * the model said nothing.
 */
export function emptyAnswerFailure(
  text: string,
  finishReason: FinishReason | undefined,
): { code: string; message: string } | undefined {
  if (text.trim() !== '') return undefined;
  return finishReason === 'content_filter'
    ? { code: 'llm_content_filtered', message: 'The model provider refused the content' }
    : { code: 'empty_answer', message: 'The model answered with no text' };
}

/**
 * The `warning` a workflow's answer gets when its turn ended at the
 * model's output limit (finish reason `length`): the answer stands, as
 * far as it got, and a client can tell that it stops mid-way.
 */
export function cutOffAnswerWarning(
  finishReason: FinishReason | undefined,
  model: string,
): { code: string; message: string; model: string } | undefined {
  if (finishReason !== 'length') return undefined;
  return {
    code: 'answer_cut_off',
    message: 'The answer reached the model’s output limit and stops mid-way.',
    model,
  };
}

/**
 * Streams one turn through the router and returns its text. Text beyond
 * `maxChars` is dropped (a caller that reads one word need not buffer an
 * essay). A turn that fails for good is returned with the router's
 * `error`, not thrown: the usage it reported before failing was paid for,
 * and the caller counts it as it counts a reply's. `costOf` prices each
 * attempt's usage at its model.
 */
export async function collectText(
  router: Pick<ModelRouter, 'stream'>,
  call: RouterCall,
  options: { maxChars?: number; costOf: (model: string, usage: Usage) => number },
): Promise<CollectedText> {
  const maxChars = options.maxChars ?? Number.POSITIVE_INFINITY;
  const collected: CollectedText = {
    text: '',
    model: call.model,
    usage: undefined,
    costUsd: 0,
    finishReason: undefined,
    error: undefined,
  };
  const parts = router.stream(call);
  for await (const part of parts) {
    if (part.type === 'text-delta' && collected.text.length < maxChars) collected.text += part.text;
    else if (part.type === 'usage') {
      collected.usage = addUsage(collected.usage, part.usage);
      collected.costUsd += options.costOf(parts.model, part.usage);
    } else if (part.type === 'finish') collected.finishReason = part.reason;
    else if (part.type === 'error') collected.error = part.error;
  }
  // As the tool loop's turns (call-model.ts).
  collected.text = storableText(collected.text);
  collected.model = parts.model;
  return collected;
}
