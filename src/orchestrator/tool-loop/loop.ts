import { askUserParameters } from '../../tools/builtins/ask-user.js';
import { callModel, turnStep } from './call-model.js';
import { NO_ANSWER_TEXT } from './final-turn.js';
import { createRepeatFailGuard } from './repeat-guard.js';
import { runTools as runTurnTools, turnState } from './run-tools.js';
import {
  assertNever,
  type LoopOptions,
  type LoopOutcome,
  type LoopRun,
  type LoopStep,
} from './types.js';

/**
 * The tool loop of one workflow: model turns and their tool calls until
 * the model answers. At the iteration cap the loop never stops silently:
 * a `warning` event says so and one last turn without tools gives a
 * best-effort answer from what was gathered.
 */
export async function runToolLoop(options: LoopOptions): Promise<LoopOutcome> {
  const run: LoopRun = {
    options,
    messages: [...options.messages],
    guard: createRepeatFailGuard(),
    turns: 0,
    iterations: 0,
    wrappingUp: false,
    wrapUp: false,
    overflowRecovered: false,
    pendingAssistant: null,
    usage: undefined,
    failure: undefined,
  };
  let step: LoopStep = { kind: 'call_model' };
  for (;;) {
    switch (step.kind) {
      case 'call_model':
        step = await callModel(run);
        break;
      case 'run_tools':
        step = await runTools(run, step.calls);
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

/** Runs the turn's tools, then decides whether the next turn may still use tools. */
async function runTools(
  run: LoopRun,
  calls: Extract<LoopStep, { kind: 'run_tools' }>['calls'],
): Promise<LoopStep> {
  const next = await runTurnTools(run, calls);
  if (next.kind === 'call_model' && run.iterations >= run.options.maxIterations) {
    run.wrappingUp = true;
    await run.options.tracker.emit('warning', null, 'info', {
      code: 'iteration_cap',
      message: `The tool loop reached its cap of ${run.options.maxIterations} iterations; answering from what was gathered, without more tools.`,
      maxIterations: run.options.maxIterations,
    });
  }
  return next;
}

/** Persists the answering turn and returns the outcome. */
async function finish(
  run: LoopRun,
  step: Extract<LoopStep, { kind: 'finished' }>,
): Promise<LoopOutcome> {
  if (run.pendingAssistant) {
    const assistant = run.pendingAssistant;
    run.pendingAssistant = null;
    await run.options.persistTurn(turnState(run, { ...assistant, toolCalls: [] }, []));
  }
  const answer =
    step.reason === 'iteration_cap' && step.answer.trim() === '' ? NO_ANSWER_TEXT : step.answer;
  return { answer, reason: step.reason, usage: run.usage, failure: run.failure };
}

/** Asks the user: the workflow waits with a `clarification_request`; the turn is persisted already. */
async function pause(
  run: LoopRun,
  step: Extract<LoopStep, { kind: 'paused' }>,
): Promise<LoopOutcome> {
  const args = askUserParameters.parse(step.call.arguments);
  await run.options.pause({
    step: turnStep(run.turns),
    toolCallId: step.call.id,
    question: args.question,
    questionType: args.question_type,
    options: args.options,
    context: args.context,
  });
  return { answer: '', reason: 'paused', usage: run.usage, failure: undefined };
}
