import { setImmediate } from 'node:timers/promises';
import type { ToolResultMessage } from '../../llm/types.js';
import { callKey } from './repeat-guard.js';
import { runOne, toolEvents } from './run-call.js';
import type { TurnState } from './state.js';
import type { LoopRun, LoopStep, PendingCall } from './types.js';

/**
 * Runs the tool calls of one turn: the calls of tools not marked
 * `sequential` together, then the sequential ones one at a time in the
 * order the model made them. Every call gets a result, errors and
 * interruptions included; the turn is persisted before anything of the
 * next one but its request.
 */
export async function runTools(run: LoopRun, calls: PendingCall[]): Promise<LoopStep> {
  // One valid question per turn pauses the loop; the other calls run first.
  const question = calls.find((call) => isValidQuestion(run, call));
  const toRun = calls.filter((call) => call !== question);
  const { parallel, sequential } = schedule(run, toRun);
  const results = new Map<PendingCall, ToolResultMessage>();
  const emit = toolEvents(run);
  await Promise.all(
    parallel.map(async (call) => {
      results.set(call, await runOne(run, call, emit));
    }),
  );
  for (const call of sequential) results.set(call, await runOne(run, call, emit));

  const toolResults = toRun.map((call) => results.get(call) as ToolResultMessage);
  const awaiting =
    question?.kind === 'valid'
      ? { toolCallId: question.call.id, toolName: question.call.name }
      : null;
  const written = completeTurn(run, toolResults, awaiting);
  if (question?.kind === 'valid') {
    await written;
    run.options.throwIfStopped();
    return { kind: 'paused', call: question.call };
  }
  // Awaited by the next turn before its tool calls run (call-model.ts);
  // until then this keeps an early failure from counting as unhandled.
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

function isValidQuestion(run: LoopRun, pending: PendingCall): boolean {
  if (pending.kind !== 'valid') return false;
  const tool = run.options.tools.get(pending.call.name);
  return tool?.pauses === true && tool.parameters.safeParse(pending.call.arguments).success;
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

/** Appends the turn to the conversation and persists it; resolves once it is written. */
function completeTurn(
  run: LoopRun,
  toolResults: ToolResultMessage[],
  awaiting: TurnState['awaiting'],
): Promise<void> {
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
  run.messages.push(...toolResults);
  return run.options.persistTurn(turnState(run, assistant, toolResults, awaiting));
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
