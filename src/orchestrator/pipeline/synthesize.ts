import { storableText } from '../../json-limits.js';
import type { FinishReason, Usage } from '../../llm/types.js';
import type { WorkflowUsage } from '../../workflows/types.js';
import { addUsage, cutOffAnswerWarning, emptyAnswerFailure, usageDetail } from '../collect-text.js';
import type { LoopOutcome } from '../tool-loop/types.js';
import { stageResults } from './next-action.js';
import type { PipelineState } from './pipeline-view.js';
import type { PipelineRun } from './run-pipeline.js';
import { announceSpentCap, type SpentCap } from './spent-cap.js';
import { buildSynthesisRequest } from './synthesis-prompt.js';

/** The step of the synthesis's events: its `llm_call`, a pause when it failed, the retry's `review`. */
export const SYNTHESIS_STEP = 'synthesis';

/**
 * The final answer: one streamed turn over the stage results. When the
 * model fails it (after the router's retries and fallbacks) or answers
 * nothing, the workflow pauses (awaiting_input, synthesis_failed) for a
 * `retry`, as a stage whose model failed does.
 */
export async function synthesize(
  run: PipelineRun,
  state: PipelineState,
  reason: 'answered' | SpentCap = 'answered',
): Promise<LoopOutcome> {
  const { input } = run;
  const request = buildSynthesisRequest({
    base: { stable: input.system.stable },
    question: input.context.input,
    history: input.context.history,
    plan: state.plan,
    results: stageResults(state.plan, state.attempts, run.policy),
    resultMaxChars: input.settings.synthesisResultMaxChars,
  });
  // The model asked first; the call's end names the one that answered.
  input.context.tracker.enqueue('llm_call', SYNTHESIS_STEP, 'started', {
    model: input.context.model,
  });
  const started = performance.now();
  let text = '';
  let finishReason: FinishReason | undefined;
  let usage: Usage | undefined;
  let costUsd = 0;
  let failure: LoopOutcome['failure'];
  const parts = input.router.stream({
    model: input.context.model,
    request,
    tokenCounts: input.tokenCounts,
    signal: input.context.signal,
    context: { tenantId: input.context.tenantId, workflowId: input.context.workflowId },
    onEvent: input.onRouterEvent,
  });
  for await (const part of parts) {
    if (part.type === 'text-delta') {
      text += part.text;
      if (!input.context.signal.aborted) input.context.tracker.token(part.text);
    } else if (part.type === 'usage') {
      // An attempt's (a failed one's too): `parts.model` is its model while its part is read.
      usage = addUsage(usage, part.usage);
      costUsd += input.costOf(parts.model, part.usage);
    } else if (part.type === 'finish') {
      finishReason = part.reason;
    } else if (part.type === 'error') {
      failure = { code: part.error.code, message: part.error.userMessage };
    }
  }
  input.throwIfStopped();
  const synthesisUsage = spend(run, usage, costUsd);
  // As a tool-loop turn's (call-model.ts): a NUL or half a character would fail the end's write.
  text = storableText(text);
  const elapsedMs = performance.now() - started;
  const { model } = parts;
  input.context.tracker.enqueue(
    'llm_call',
    SYNTHESIS_STEP,
    failure ? 'failed' : 'completed',
    failure
      ? { model, error: failure, ...synthesisUsage }
      : { model, finishReason: finishReason ?? null, ...synthesisUsage },
    elapsedMs,
  );
  // As the tool loop's answer (call-model.ts): a budget's early synthesis too, whose stages ran.
  failure ??= emptyAnswerFailure(text, finishReason);
  if (failure) {
    // A cap this synthesis reached is named now, with the pause: its retry
    // answers under it, and names no cap reached before it ran.
    announceSpentCap(
      run,
      'a retry of the synthesis writes the answer from the stages done so far.',
    );
    // The stages' results are persisted: the user retries the synthesis
    // alone (review.ts) rather than lose them with the workflow.
    await input.pause({
      reason: 'synthesis_failed',
      spent: { usage: run.usage, costUsd: run.costUsd },
      event: {
        type: 'synthesis_failed',
        step: SYNTHESIS_STEP,
        status: 'paused',
        detail: { error: failure },
        elapsedMs: null,
      },
    });
    return paused(run);
  }
  const cutOff = cutOffAnswerWarning(finishReason, model);
  if (cutOff) input.context.tracker.enqueue('warning', SYNTHESIS_STEP, 'info', cutOff);
  return outcome(run, { answer: text, reason, failure: undefined });
}

/**
 * Adds the planner's or the synthesis's usage and its price (at the model
 * that answered each turn); returns it as the synthesis's `llm_call` carries it.
 */
export function spend(
  run: PipelineRun,
  usage: Usage | undefined,
  costUsd: number,
): { usage: WorkflowUsage } | undefined {
  if (!usage) return undefined;
  run.usage = addUsage(run.usage, usage);
  run.costUsd += costUsd;
  return { usage: usageDetail(usage, costUsd) };
}

export function outcome(
  run: PipelineRun,
  end: Pick<LoopOutcome, 'answer' | 'reason' | 'failure'>,
): LoopOutcome {
  return { ...end, usage: run.usage, costUsd: run.costUsd };
}

export function paused(run: PipelineRun): LoopOutcome {
  return outcome(run, { answer: '', reason: 'paused', failure: undefined });
}
