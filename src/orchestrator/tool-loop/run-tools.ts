import { setImmediate } from 'node:timers/promises';
import type { ToolResultMessage } from '../../llm/types.js';
import { wrapUntrustedOutput } from '../../tools/untrusted-output.js';
import { turnStep } from './call-model.js';
import { type Execution, executeTool } from './execute-tool.js';
import { blockedMessage, callKey, REPEAT_WARNING } from './repeat-guard.js';
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

type EmitToolEvent = (
  status: 'started' | 'completed' | 'failed',
  detail: Record<string, unknown>,
  elapsedMs?: number,
) => void;

/**
 * `tool_call` events of one turn, queued in the order they happen (calls
 * run in parallel) and written with the turn. None once the run is
 * stopped: the workflow may have ended already.
 */
function toolEvents(run: LoopRun): EmitToolEvent {
  const step = turnStep(run.turns);
  return (status, detail, elapsedMs) => {
    if (run.options.signal.aborted) return;
    run.options.tracker.enqueue('tool_call', step, status, detail, elapsedMs);
  };
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

async function runOne(
  run: LoopRun,
  pending: PendingCall,
  emit: EmitToolEvent,
): Promise<ToolResultMessage> {
  const { options } = run;
  const step = turnStep(run.turns);
  const callId = pending.kind === 'valid' ? pending.call.id : pending.id;
  const name = pending.kind === 'valid' ? pending.call.name : pending.name;
  const detail = { tool: name, callId };
  const message = (content: string, isError: boolean): ToolResultMessage => ({
    role: 'tool',
    toolCallId: callId,
    toolName: name,
    content: wrapUntrustedOutput({ toolName: name, content, isError }, options.toolOutputMaxChars),
    isError,
  });

  const rejection = rejectBeforeRunning(run, pending);
  if (rejection) {
    emit('failed', {
      ...detail,
      error: rejection.error,
      ...(rejection.blocked ? { blocked: true } : {}),
    });
    return message(rejection.content, true);
  }
  const call = pending.kind === 'valid' ? pending.call : undefined;
  const tool = call && options.tools.get(call.name);
  if (!call || !tool) throw new Error('a call that passed the checks has a tool');

  emit('started', detail);
  const started = performance.now();
  const parsed = tool.parameters.safeParse(call.arguments);
  const execution: Execution = parsed.success
    ? await executeTool({
        tool,
        args: parsed.data,
        context: { tenantId: options.tenantId, workflowId: options.workflowId, step, callId },
        signal: options.signal,
      })
    : {
        result: { content: `Error: invalid arguments: ${parsed.error.message}`, isError: true },
        outcome: 'failed',
      };
  const elapsedMs = performance.now() - started;
  const result = message(execution.result.content, execution.result.isError);
  // The guard compares results as persisted (wrapped), so a resumed loop replays it exactly.
  const warn = run.guard.record(call.name, call.arguments, {
    isError: execution.result.isError,
    content: result.content,
  });
  emit(
    execution.result.isError ? 'failed' : 'completed',
    {
      ...detail,
      ...(execution.result.isError ? { error: execution.outcome } : {}),
      ...(warn ? { repeatWarning: true } : {}),
    },
    elapsedMs,
  );
  return warn ? { ...result, content: `${result.content}\n${REPEAT_WARNING}` } : result;
}

/** Calls answered with an error without running: invalid JSON, unknown tool, blocked repeat. */
function rejectBeforeRunning(
  run: LoopRun,
  pending: PendingCall,
): { content: string; error: string; blocked?: boolean } | undefined {
  if (pending.kind === 'invalid') {
    return {
      content: `Error: the arguments of this call could not be used (${pending.reason}). Send valid JSON arguments matching the tool's parameters.`,
      error: 'invalid_arguments',
    };
  }
  const { call } = pending;
  if (!run.options.tools.get(call.name)) {
    return {
      content: `Error: there is no tool named "${call.name}". Available tools: ${run.options.tools.names().join(', ') || 'none'}.`,
      error: 'unknown_tool',
    };
  }
  const tool = run.options.tools.get(call.name);
  if (tool?.pauses) {
    const parsed = tool.parameters.safeParse(call.arguments);
    return {
      content: parsed.success
        ? 'Error: only one question to the user per turn; ask the others after the answer.'
        : `Error: invalid arguments: ${parsed.error.message}`,
      error: parsed.success ? 'one_question_per_turn' : 'invalid_arguments',
    };
  }
  if (run.guard.isBlocked(call.name, call.arguments)) {
    return { content: blockedMessage(call.name), error: 'repeated_failure', blocked: true };
  }
  return undefined;
}
