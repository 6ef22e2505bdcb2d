import type { InputEstimate } from '../../llm/output-room.js';
import type { Message, ModelRequest, SystemPrompt } from '../../llm/types.js';
import { budgetLine } from '../system-prompt.js';
import { budgetLeft } from './budget.js';
import {
  CONDENSE_SHARE,
  condenseToolResults,
  estimateInput,
  RECOVER_SHARE,
  WRAP_UP_INSTRUCTION,
  WRAP_UP_SHARE,
} from './context-window.js';
import { buildFinalSystem } from './final-turn.js';
import type { LoopRun, LoopStep } from './types.js';

/**
 * The request of the next turn, with the context-window checks applied
 * first (context-window.ts): older tool results condensed at 80% of the
 * window, the wrap-up instruction from 70% on. Each is announced once
 * with a `warning` event. With it, the estimate of its input those checks
 * made, when the request did not change after it: the router caps each
 * attempt's output to the room that input leaves in its model's window.
 */
export async function prepareRequest(
  run: LoopRun,
  withTools: boolean,
): Promise<{ request: ModelRequest; input?: InputEstimate }> {
  const { options } = run;
  const build = (messages: Message[]) => buildRequest(run, withTools, messages);
  // Decided before condensing: a turn whose results jump past 80% at once
  // has passed 70% too, and condensing must not hide that from the model.
  const first = build(run.messages);
  const input = estimateInput(first, options.limits);
  const share = input.tokens / options.limits.contextWindow;
  const wrapUpBefore = run.wrapUp;
  let condensed = false;
  if (share >= CONDENSE_SHARE) {
    const result = condenseToolResults({
      messages: run.messages,
      buildRequest: build,
      limits: options.limits,
      share: WRAP_UP_SHARE,
      keepLatest: true,
    });
    if (result.condensed > 0) {
      condensed = true;
      run.messages.splice(0, run.messages.length, ...result.messages);
      options.tracker.enqueue('warning', null, 'info', {
        code: 'context_condensed',
        message: `The conversation neared the model’s context window; ${result.condensed} earlier tool results were condensed to one line each.`,
        condensed: result.condensed,
      });
    }
  }
  if (!run.wrapUp && share >= WRAP_UP_SHARE) {
    run.wrapUp = true;
    options.tracker.enqueue('warning', null, 'info', {
      code: 'context_wrap_up',
      message:
        'The conversation reached about 70% of the model’s context window; the model is asked to wrap up.',
    });
  }
  // Unchanged since it was estimated, the request is not counted again.
  if (!condensed && run.wrapUp === wrapUpBefore) return { request: first, input };
  return { request: build(run.messages) };
}

function buildRequest(run: LoopRun, withTools: boolean, messages: Message[]): ModelRequest {
  const { options } = run;
  const definitions = options.tools.definitions();
  return {
    system: systemOf(run),
    messages: [...messages],
    ...(definitions.length > 0
      ? { tools: definitions, toolChoice: withTools ? 'auto' : 'none' }
      : {}),
  };
}

/**
 * The turn's system prompt: the workflow's, its volatile part followed,
 * once the budget runs low, by the budget's line and, past 70% of the
 * window, by the wrap-up instruction; the last turn's (no tools) once the
 * loop wraps up.
 */
function systemOf(run: LoopRun): SystemPrompt {
  const { system } = run.options;
  if (run.wrappingUp) return buildFinalSystem(system);
  const lines = [system.volatile, budgetLine(budgetLeft(run))];
  if (run.wrapUp) lines.push(WRAP_UP_INSTRUCTION);
  return { stable: system.stable, volatile: lines.filter(Boolean).join('\n') };
}

/** Said when even the recovered request does not fit and the model wrote nothing usable. */
export const PARTIAL_ANSWER_TEXT =
  'The conversation grew past what the model can read, so this answer is incomplete: the tool results gathered so far could not all be taken into account.';

/**
 * After a context-length error: the first time, every tool result is
 * condensed to bring the request under 60% of the window and the turn is
 * tried again; the second time the loop ends with a partial answer.
 */
export async function recoverFromOverflow(
  run: LoopRun,
  turn: { text: string; withTools: boolean },
): Promise<LoopStep> {
  const { options } = run;
  if (!run.overflowRecovered) {
    run.overflowRecovered = true;
    const result = condenseToolResults({
      messages: run.messages,
      buildRequest: (messages) => buildRequest(run, turn.withTools, messages),
      limits: options.limits,
      share: RECOVER_SHARE,
      keepLatest: false,
    });
    run.messages.splice(0, run.messages.length, ...result.messages);
    options.tracker.enqueue('warning', null, 'info', {
      code: 'context_length_recovery',
      message: `The model’s context window was exceeded; ${result.condensed} tool results were condensed and the turn is tried once more.`,
      condensed: result.condensed,
    });
    // The retry is the same turn again, not a new one.
    run.turns -= 1;
    if (turn.withTools) run.iterations -= 1;
    return { kind: 'call_model' };
  }
  options.tracker.enqueue('warning', null, 'info', {
    code: 'context_exhausted',
    message: 'The model’s context window was exceeded again; the answer is partial.',
  });
  // This workflow's own text only: before its question are the session's
  // earlier answers, which are not this one's.
  const question = run.messages.findLastIndex((message) => message.role === 'user');
  const earlier = run.messages
    .slice(question + 1)
    .findLast((message) => message.role === 'assistant' && message.content.trim() !== '');
  const partial = turn.text.trim() || earlier?.content || PARTIAL_ANSWER_TEXT;
  return { kind: 'finished', answer: partial, reason: 'context_exhausted' };
}
