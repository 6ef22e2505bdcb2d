import type { ToolCall, ToolResultMessage } from '../../llm/types.js';
import { reachedCap, spentBy } from './budget.js';
import { turnStep } from './call-model.js';
import { blockedMessage, REPEAT_WARNING } from './repeat-guard.js';
import { messagesOfTurn, type TurnState } from './state.js';
import { isOverCapResult } from './tool-call-limits.js';
import type { LoopRun, LoopStep } from './types.js';

/**
 * Where a loop continues when its workflow runs again (after the user's
 * answer or approval, or on another replica after a crash): the turns
 * earlier runs persisted, and what the user decided on the calls they
 * held (held-calls.ts).
 */
export interface LoopResume {
  turns: TurnState[];
  /** The user's answers by the `ask_user` call they answer (`answerKey`). */
  answers: ReadonlyMap<string, string>;
  /** The user's approvals and refusals by the call they decide on (`answerKey`). */
  approvals: ReadonlyMap<string, ApprovalDecision>;
}

/** What the user decided on a call of a tool that requires approval (a `tool_approval` event). */
export interface ApprovalDecision {
  approved: boolean;
  reason: string | null;
}

/**
 * Which question an answer answers (and which call a decision is on): the
 * step of the turn that made it and the call's id. Ids alone may repeat
 * from turn to turn (an OpenAI-compatible server that sends none gets
 * `call_<index>`, so every turn's first call is `call_0`).
 */
export function answerKey(step: string | null, toolCallId: string): string {
  return `${step ?? ''}\u0000${toolCallId}`;
}

/**
 * Rebuilds the loop's state from the persisted turns and says what comes
 * next. A completed turn is never run again: the conversation, the turn
 * and iteration counts and the repeat-fail guard are restored from the
 * rows, so the next turn sees exactly what it would have seen had the
 * loop never stopped.
 */
export function restoreLoop(run: LoopRun, resume: LoopResume): LoopStep {
  for (const [index, turn] of resume.turns.entries()) {
    run.messages.push(...messagesOfTurn(turn));
    replayGuard(run, turn);
    // A turn with tool calls was offered tools; the answering turn may not have been.
    if (turn.assistant.toolCalls.length > 0) run.iterations += 1;
    run.turns = turn.turn;
    if (!turn.awaiting) continue;
    const held = heldCallsOf(turn, turn.awaiting);
    const answer = resume.answers.get(answerKey(turnStep(turn.turn), turn.awaiting.toolCallId));
    // A turn that held one question, answered: its row stays as it paused, the answer is the event's.
    if (held.length === 1 && answer !== undefined) {
      run.messages.push(answerMessage(turn.awaiting, answer));
      continue;
    }
    // Every held call is resolved, and the turn rewritten, before the next turn's calls run.
    if (index < resume.turns.length - 1) {
      throw new Error(`turn ${turn.turn} has calls without results, and a turn follows it`);
    }
    // Resolved from the decisions; the first without one pauses again (cut off before the pause).
    return {
      kind: 'resolve_held',
      turn: {
        assistant: {
          content: turn.assistant.content,
          toolCalls: turn.assistant.toolCalls,
          finishReason: turn.finishReason,
          model: turn.model,
        },
        results: messagesOfTurn(turn).filter(
          (message): message is ToolResultMessage => message.role === 'tool',
        ),
        held,
      },
    };
  }
  const last = resume.turns.at(-1);
  // Cut off after persisting its answering turn but before the workflow ended.
  if (last && last.assistant.toolCalls.length === 0 && !last.awaiting) {
    return {
      kind: 'finished',
      answer: last.assistant.content,
      // Past a cap, the answering turn was the last one, without tools.
      reason: reachedCap(run.options.budget, spentBy(run)) ?? 'answered',
    };
  }
  // The next turn checks the budget first and wraps up, with its warning, if a cap is reached.
  return { kind: 'call_model' };
}

/**
 * A waiting turn's calls without a result, the one it awaits first, then
 * the others in the model's order: held for the user, still to resolve.
 */
function heldCallsOf(turn: TurnState, awaiting: NonNullable<TurnState['awaiting']>): ToolCall[] {
  const first = turn.assistant.toolCalls.find((made) => made.id === awaiting.toolCallId);
  if (!first) throw new Error(`turn ${turn.turn} awaits a call it does not have`);
  const resulted = new Set(turn.toolResults.map((result) => result.toolCallId));
  const others = turn.assistant.toolCalls.filter(
    (made) => made !== first && !resulted.has(made.id),
  );
  return [first, ...others];
}

/** The user's answer as the result of the `ask_user` call that asked for it. */
export function answerMessage(
  awaiting: NonNullable<TurnState['awaiting']>,
  answer: string,
): ToolResultMessage {
  return {
    role: 'tool',
    toolCallId: awaiting.toolCallId,
    toolName: awaiting.toolName,
    content: `The user answered: ${answer}`,
    isError: false,
  };
}

/**
 * Failed calls count toward the guard as if they had just run; the warning
 * suffix is not part of the error. A blocked call did not run: as live, it
 * leaves the guard as it was (recorded, its message would be a new error
 * and unblock the call); nor did a call past the turn's cap.
 */
function replayGuard(run: LoopRun, turn: TurnState): void {
  for (const result of turn.toolResults) {
    const call = turn.assistant.toolCalls.find((made) => made.id === result.toolCallId);
    if (
      !call ||
      isOverCapResult(result.content) ||
      result.content.includes(blockedMessage(call.name))
    ) {
      continue;
    }
    const content = result.content.endsWith(`\n${REPEAT_WARNING}`)
      ? result.content.slice(0, -REPEAT_WARNING.length - 1)
      : result.content;
    run.guard.record(call.name, call.arguments, { isError: result.isError, content });
  }
}
