import { LlmError } from '../llm/errors.js';
import type { ModelRouter, RouterCall } from '../llm/router/router.js';
import type { CallContext } from '../llm/router/types.js';
import { CLASSIFY_MARKER } from '../llm/scripted/markers.js';
import type { ModelRequest, SystemPrompt, Usage } from '../llm/types.js';
import type { WorkflowKind, WorkflowUsage } from '../workflows/types.js';
import { type CollectedText, collectText, usageDetail } from './collect-text.js';

/**
 * The optional model check of complexity detection: one short turn to a
 * cheap model that answers `simple` or `complex`.
 */

/** What the check needs from the caller; present only when CLASSIFY_WITH_MODEL is on. */
export interface ModelCheck {
  router: Pick<ModelRouter, 'stream'>;
  /** Catalogue name of the cheap model. */
  model: string;
  /** The workflow's signal: cancelling the workflow cancels the check. */
  signal: AbortSignal;
  context: CallContext;
  /** Retries and fallbacks of the check, for the tracker's llm_retry / llm_fallback events. */
  onEvent?: RouterCall['onEvent'];
  /** Defaults to CLASSIFY_CHECK_TIMEOUT_MS. */
  timeoutMs?: number;
  /** What a call of the model cost, at its prices; free when not given. */
  costOf?: (model: string, usage: Usage) => number;
}

/** `usage`: what the check's call used and cost, when the provider reported it. */
export type ModelCheckOutcome =
  | { status: 'answered'; kind: WorkflowKind; model: string; usage: WorkflowUsage | undefined }
  | { status: 'unusable'; answer: string; model: string; usage: WorkflowUsage | undefined }
  | { status: 'failed'; problem: string; error: unknown; usage: WorkflowUsage | undefined };

/**
 * A classification that takes longer than this costs more latency than a
 * misrouted question does, so the check gives up and the keywords decide.
 */
export const CLASSIFY_CHECK_TIMEOUT_MS = 10_000;

/** "simple" or "complex" is one or two tokens; the rest is slack for quotes or a full stop. */
const MAX_OUTPUT_TOKENS = 10;
/** Collected text beyond this is never needed to find the answer. */
const MAX_ANSWER_CHARS = 200;

/** Stable across workflows, so providers' prompt caches hit it. */
export const CLASSIFY_SYSTEM_PROMPT: SystemPrompt = {
  stable: [
    CLASSIFY_MARKER,
    'The user message is the question to classify. Do not answer it.',
    'simple: one fact, explanation, calculation or lookup, answered in a few steps.',
    'complex: several parts that build on each other (gather data, then compare,',
    'cross-reference or tabulate it), or the same work repeated for each of several items.',
    'Reply with exactly one word: simple or complex.',
  ].join('\n'),
};

export async function askModel(check: ModelCheck, input: string): Promise<ModelCheckOutcome> {
  const timeoutMs = check.timeoutMs ?? CLASSIFY_CHECK_TIMEOUT_MS;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const stopOnCancel = () => controller.abort();
  check.signal.addEventListener('abort', stopOnCancel, { once: true });
  if (check.signal.aborted) controller.abort();
  const request: ModelRequest = {
    system: CLASSIFY_SYSTEM_PROMPT,
    messages: [{ role: 'user', content: input }],
    maxOutputTokens: MAX_OUTPUT_TOKENS,
    temperature: 0,
  };
  const stopped = { cancelled: check.signal, timedOut: controller.signal, timeoutMs };
  let collected: CollectedText;
  try {
    collected = await collectText(
      check.router,
      {
        model: check.model,
        request,
        signal: controller.signal,
        context: check.context,
        ...(check.onEvent ? { onEvent: check.onEvent } : {}),
      },
      { maxChars: MAX_ANSWER_CHARS, costOf: check.costOf ?? (() => 0) },
    );
  } catch (error) {
    return { status: 'failed', problem: problemOf(error, stopped), error, usage: undefined };
  } finally {
    clearTimeout(timer);
    check.signal.removeEventListener('abort', stopOnCancel);
  }
  // The model that answered: named as such, after a fallback too (each attempt is priced at its own).
  const { model } = collected;
  // A failed check that reported usage before its failure was paid for too.
  const usage = collected.usage && usageDetail(collected.usage, collected.costUsd);
  if (collected.error) {
    return {
      status: 'failed',
      problem: problemOf(collected.error, stopped),
      error: collected.error,
      usage,
    };
  }
  const answer = collected.text;
  const kind = parseComplexityAnswer(answer);
  return kind
    ? { status: 'answered', kind, model, usage }
    : { status: 'unusable', answer, model, usage };
}

/** Why the check failed, as its classification's reason says. */
function problemOf(
  error: unknown,
  stopped: { cancelled: AbortSignal; timedOut: AbortSignal; timeoutMs: number },
): string {
  if (stopped.cancelled.aborted) return 'it was cancelled';
  if (stopped.timedOut.aborted) return `it took longer than ${stopped.timeoutMs} ms`;
  return error instanceof LlmError ? error.userMessage.toLowerCase() : 'of an unexpected error';
}

/**
 * Reads the model's answer: the scripted model's JSON (`{"complexity":
 * "complex", ...}`, possibly cut short by the token limit), else a reply
 * naming exactly one of the two words ("Complex.", "Answer: simple").
 * A reply naming both or neither is no answer.
 */
export function parseComplexityAnswer(text: string): WorkflowKind | undefined {
  const json = /"complexity"\s*:\s*"(simple|complex)"/i.exec(text)?.[1];
  if (json) return json.toLowerCase() as WorkflowKind;
  const words = new Set(
    [...text.matchAll(/(?<![\p{L}\p{N}_])(simple|complex)(?![\p{L}\p{N}_])/giu)].map((match) =>
      (match[1] as string).toLowerCase(),
    ),
  );
  if (words.size !== 1) return undefined;
  return [...words][0] as WorkflowKind;
}
