import type { ToolCall, ToolResultMessage } from '../../llm/types.js';
import { turnStep } from './call-model.js';
import { REPEAT_WARNING } from './repeat-guard.js';
import { answerKey, answerMessage } from './resume.js';
import { holdOfHeld, recordInGuard, runOne, toolEvents } from './run-call.js';
import { nextTurnAfter, turnState } from './run-tools.js';
import type { HeldTurn, LoopRun, LoopStep } from './types.js';

/**
 * The calls of a turn held for the user: a question (ask_user) waits for
 * the answer, a call of a tool that requires approval for the user's
 * decision. The turn's other calls have run; the held ones are resolved
 * one at a time, in the order the model made them, each with what the
 * user decided (resume.ts reads the decisions from their events):
 *
 * - answered: the answer is the question's result;
 * - approved: the call runs now, as it would have (its timeout, the
 *   Idempotency-Key of its workflow, turn and call);
 * - declined: its result is an error saying so, with the user's reason;
 *   the call never runs.
 *
 * At the first call without a decision, the turn is persisted with the
 * results so far, `awaiting` that call, and the workflow pauses for it.
 * Once every held call has its result, the turn is persisted whole (the
 * rewrite of a turn that waited; store/event-statement-parts.ts) before
 * the next turn's calls run, as every turn is. A crash before then loses the
 * results of this run: the run taking over resolves the calls again from
 * the same decisions, so an approved call runs again (at-least-once) with
 * the same Idempotency-Key, and every call of the turn ends with exactly
 * one result.
 */
export async function resolveHeld(run: LoopRun, turn: HeldTurn): Promise<LoopStep> {
  const { assistant, results } = turn;
  const emit = toolEvents(run);
  for (const call of turn.held) {
    const result = await resolve(run, call, emit);
    if (!result) {
      const awaiting = { toolCallId: call.id, toolName: call.name };
      await run.options.persistTurn(turnState(run, assistant, results, awaiting));
      run.options.throwIfStopped();
      return { kind: 'paused', call, hold: holdOfHeld(run, call) };
    }
    results.push(result);
    run.messages.push(result);
  }
  return nextTurnAfter(run, run.options.persistTurn(turnState(run, assistant, results)));
}

/** A held call's result from the user's decision; undefined while there is none. */
async function resolve(
  run: LoopRun,
  call: ToolCall,
  emit: ReturnType<typeof toolEvents>,
): Promise<ToolResultMessage | undefined> {
  const key = answerKey(turnStep(run.turns), call.id);
  const resume = run.options.resume;
  if (holdOfHeld(run, call) === 'question') {
    const answer = resume?.answers.get(key);
    return answer === undefined
      ? undefined
      : answerMessage({ toolCallId: call.id, toolName: call.name }, answer);
  }
  const decision = resume?.approvals.get(key);
  if (!decision) return undefined;
  if (decision.approved) return runOne(run, { kind: 'valid', call }, emit);
  const declined = declinedMessage(call, decision.reason);
  // Counted by the repeat-fail guard as any failed call, as a resumed loop replays it.
  const warn = recordInGuard(run, call, declined);
  emit('failed', {
    tool: call.name,
    callId: call.id,
    error: 'declined',
    ...(warn ? { repeatWarning: true } : {}),
  });
  return warn ? { ...declined, content: `${declined.content}\n${REPEAT_WARNING}` } : declined;
}

/**
 * The result of a call the user declined: an error the model reads, with
 * the user's reason. Not wrapped as untrusted tool output: no tool wrote
 * it, and the reason is the user's, as an answer is.
 */
export function declinedMessage(call: ToolCall, reason: string | null): ToolResultMessage {
  const why = reason === null ? '' : ` The user's reason: ${reason}`;
  return {
    role: 'tool',
    toolCallId: call.id,
    toolName: call.name,
    content: `The user declined this call of ${call.name}; it did not run.${why}`,
    isError: true,
  };
}
