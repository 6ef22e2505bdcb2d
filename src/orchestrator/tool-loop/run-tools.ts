import { setImmediate } from 'node:timers/promises';
import type { ToolCall, ToolResultMessage } from '../../llm/types.js';
import { callKey } from './repeat-guard.js';
import { holdOf, holdOfHeld, runOne, toolEvents } from './run-call.js';
import type { TurnState } from './state.js';
import { forEachAtMost, refuseOverCap } from './tool-call-limits.js';
import type { LoopRun, LoopStep, PendingCall } from './types.js';

/**
 * Runs the tool calls of one turn: the calls of tools not marked
 * `sequential` together (at most `toolCalls.concurrency` at once), then
 * the sequential ones one at a time in the order the model made them.
 * Calls past `toolCalls.maxPerTurn` do not run (tool-call-limits.ts).
 * Every call gets a result, errors and interruptions included; the turn
 * is persisted before anything of the next one but its request. Calls
 * held for the user (a question, calls of tools that require approval)
 * wait until the others have run, and are then resolved one at a time
 * (held-calls.ts).
 */
export async function runTools(run: LoopRun, made: PendingCall[]): Promise<LoopStep> {
  const { maxPerTurn, concurrency } = run.options.toolCalls;
  const overCap = made.length > maxPerTurn ? refuseOverCap(run, made) : undefined;
  const calls = overCap ? made.slice(0, maxPerTurn) : made;
  // Held for the user (a question, calls to approve; run-call.ts holdOf): the other calls run first.
  const held: ToolCall[] = [];
  for (const call of calls) {
    const asked = held.some((made) => holdOfHeld(run, made) === 'question');
    if (call.kind === 'valid' && holdOf(run, call, asked)) held.push(call.call);
  }
  const toRun = calls.filter((call) => call.kind !== 'valid' || !held.includes(call.call));
  const { parallel, sequential } = schedule(run, toRun);
  const results = new Map<PendingCall, ToolResultMessage>();
  const emit = toolEvents(run);
  await forEachAtMost(parallel, concurrency, async (call) => {
    results.set(call, await runOne(run, call, emit));
  });
  for (const call of sequential) results.set(call, await runOne(run, call, emit));

  const toolResults = toRun.map((call) => results.get(call) as ToolResultMessage);
  // Last, as in the model's order: each call past the cap comes after every call that ran.
  if (overCap) toolResults.push(...overCap);
  const assistant = takeAssistant(run);
  run.messages.push(...toolResults);
  // Persisted by the resolution, which pauses at the first held call.
  if (held.length > 0)
    return { kind: 'resolve_held', turn: { assistant, results: toolResults, held } };
  return nextTurnAfter(run, run.options.persistTurn(turnState(run, assistant, toolResults)));
}

/**
 * The next turn, after `written` (this turn's write), which it awaits
 * before its tool calls run (call-model.ts).
 */
export async function nextTurnAfter(run: LoopRun, written: Promise<void>): Promise<LoopStep> {
  // Until then this keeps an early failure from counting as unhandled.
  written.catch(() => undefined);
  // One turn of the event loop, in which the write queue sends the turn's
  // statement (tracker/write-queue.ts): PostgreSQL then writes it while the
  // next request is built and answered, and at concurrency 1 it commits
  // before that reply is in. Sent after the request instead, it hid only
  // ~0.1 ms of its ~0.55 ms (bench/simple-path timelines, 2026-12-01).
  await setImmediate();
  run.options.throwIfStopped();
  return { kind: 'call_model', after: written };
}

/**
 * Which calls run together and which one at a time, in the model's order:
 * tools marked `sequential`, and a call identical to one before it in the
 * turn (same tool, same arguments), which runs after it so the repeat-fail
 * guard sees that outcome first: one earlier failure and the same call
 * twice in a turn is three attempts, the third blocked.
 */
function schedule(
  run: LoopRun,
  calls: PendingCall[],
): { parallel: PendingCall[]; sequential: PendingCall[] } {
  const parallel: PendingCall[] = [];
  const sequential: PendingCall[] = [];
  const seen = new Set<string>();
  for (const call of calls) {
    const key = call.kind === 'valid' ? callKey(call.call.name, call.call.arguments) : undefined;
    if (isSequential(run, call) || (key !== undefined && seen.has(key))) sequential.push(call);
    else parallel.push(call);
    if (key !== undefined) seen.add(key);
  }
  return { parallel, sequential };
}

function isSequential(run: LoopRun, pending: PendingCall): boolean {
  return pending.kind === 'valid' && run.options.tools.get(pending.call.name)?.sequential === true;
}

/** The turn's assistant message, appended to the conversation: its results follow it. */
function takeAssistant(run: LoopRun): NonNullable<LoopRun['pendingAssistant']> {
  const assistant = run.pendingAssistant ?? {
    content: '',
    toolCalls: [],
    finishReason: null,
    model: run.options.model,
  };
  run.pendingAssistant = null;
  run.messages.push({
    role: 'assistant',
    content: assistant.content,
    toolCalls: assistant.toolCalls,
  });
  return assistant;
}

export function turnState(
  run: LoopRun,
  assistant: NonNullable<LoopRun['pendingAssistant']>,
  toolResults: ToolResultMessage[],
  awaiting: TurnState['awaiting'] = null,
): TurnState {
  return {
    schemaVersion: 1,
    turn: run.turns,
    model: assistant.model,
    assistant: { content: assistant.content, toolCalls: assistant.toolCalls },
    toolResults: toolResults.map((result) => ({
      toolCallId: result.toolCallId,
      toolName: result.toolName,
      content: result.content,
      isError: result.isError === true,
    })),
    awaiting,
    finishReason: assistant.finishReason,
  };
}
