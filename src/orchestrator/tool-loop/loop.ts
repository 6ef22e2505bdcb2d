import { askUserParameters } from '../../tools/builtins/ask-user.js';
import { isBudgetCap } from './budget.js';
import { callModel, turnStep } from './call-model.js';
import { NO_ANSWER_TEXT } from './final-turn.js';
import { resolveHeld } from './held-calls.js';
import { createRepeatFailGuard } from './repeat-guard.js';
import { restoreLoop } from './resume.js';
import { runTools, turnState } from './run-tools.js';
import {
  assertNever,
  type LoopOptions,
  type LoopOutcome,
  type LoopRun,
  type LoopStep,
} from './types.js';

/**
 * The tool loop of one workflow: model turns and their tool calls until
 * the model answers. At a budget cap (iterations, tokens, cost; see
 * budget.ts) the loop never stops silently: a `warning` event names the
 * cap and one last turn without tools gives a best-effort answer from what
 * was gathered.
 */
export async function runToolLoop(options: LoopOptions): Promise<LoopOutcome> {
  const run = startLoopRun(options);
  let step: LoopStep = options.resume
    ? restoreLoop(run, options.resume)
    : { kind: 'call_model', after: options.firstReplyAfter };
  for (;;) {
    switch (step.kind) {
      case 'call_model':
        step = await callModel(run, step.after);
        break;
      case 'run_tools':
        // The budget is checked before the next turn (callModel), whichever path leads to it.
        step = await runTools(run, step.calls);
        break;
      case 'resolve_held':
        step = await resolveHeld(run, step.turn);
        break;
      case 'finished':
        return finish(run, step);
      case 'paused':
        return pause(run, step);
      default:
        return assertNever(step);
    }
  }
}

/** Queues the answering turn (written with the workflow's end) and returns the outcome. */
async function finish(
  run: LoopRun,
  step: Extract<LoopStep, { kind: 'finished' }>,
): Promise<LoopOutcome> {
  if (run.pendingAssistant) {
    const assistant = run.pendingAssistant;
    run.pendingAssistant = null;
    run.options.queueTurn(turnState(run, { ...assistant, toolCalls: [] }, []));
  }
  const answer =
    isBudgetCap(step.reason) && step.answer.trim() === '' ? NO_ANSWER_TEXT : step.answer;
  return {
    answer,
    reason: step.reason,
    usage: run.usage,
    costUsd: run.costUsd,
    failure: run.failure,
  };
}

/**
 * Waits for the user: a question with a `clarification_request`, a call
 * that requires approval with a `tool_approval_request`; the turn is
 * persisted already.
 */
async function pause(
  run: LoopRun,
  step: Extract<LoopStep, { kind: 'paused' }>,
): Promise<LoopOutcome> {
  const spent = { usage: run.usage, costUsd: run.costUsd };
  const { call } = step;
  if (step.hold === 'question') {
    const args = askUserParameters.parse(call.arguments);
    await run.options.pause(
      {
        reason: 'clarification',
        request: {
          step: turnStep(run.turns),
          toolCallId: call.id,
          question: args.question,
          questionType: args.question_type,
          options: args.options,
          context: args.context,
        },
      },
      spent,
    );
  } else {
    await run.options.pause(
      {
        reason: 'tool_approval',
        request: {
          step: turnStep(run.turns),
          toolCallId: call.id,
          tool: call.name,
          arguments: call.arguments,
        },
      },
      spent,
    );
  }
  return {
    answer: '',
    reason: 'paused',
    usage: run.usage,
    costUsd: run.costUsd,
    failure: undefined,
  };
}

/** A loop run before its first turn (or before `restoreLoop` rebuilds it). */
export function startLoopRun(options: LoopOptions): LoopRun {
  return {
    options,
    messages: [...options.messages],
    guard: createRepeatFailGuard(),
    turns: 0,
    iterations: 0,
    wrappingUp: null,
    wrapUp: false,
    overflowRecovered: false,
    pendingAssistant: null,
    usage: undefined,
    costUsd: 0,
    failure: undefined,
  };
}
