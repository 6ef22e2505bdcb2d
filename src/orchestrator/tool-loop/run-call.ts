import type { ToolCall, ToolResultMessage } from '../../llm/types.js';
import { wrapUntrustedOutput } from '../../tools/untrusted-output.js';
import { turnStep } from './call-model.js';
import { type Execution, executeTool } from './execute-tool.js';
import { blockedMessage, REPEAT_WARNING } from './repeat-guard.js';
import type { Hold, LoopRun, PendingCall } from './types.js';

/**
 * One tool call of a turn, run or rejected, as its result and its
 * `tool_call` events; and which calls are held for the user instead
 * (held-calls.ts resolves them).
 */

export type EmitToolEvent = (
  status: 'started' | 'completed' | 'failed',
  detail: Record<string, unknown>,
  elapsedMs?: number,
) => void;

/**
 * `tool_call` events of one turn, queued in the order they happen (calls
 * run in parallel) and written with the turn. None once the run is
 * stopped: the workflow may have ended already.
 */
export function toolEvents(run: LoopRun): EmitToolEvent {
  const step = turnStep(run.turns);
  return (status, detail, elapsedMs) => {
    if (run.options.signal.aborted) return;
    run.options.tracker.enqueue('tool_call', step, status, detail, elapsedMs);
  };
}

/**
 * Why a call waits for the user rather than running now, if it does: the
 * first valid question of its turn (the others are rejected, one question
 * per turn), and every call of a tool that requires approval which would
 * run (valid arguments, not blocked by the repeat-fail guard: the user is
 * not asked about a call that could not run anyway).
 */
export function holdOf(
  run: LoopRun,
  pending: PendingCall,
  questionHeld: boolean,
): Hold | undefined {
  if (pending.kind !== 'valid') return undefined;
  const { call } = pending;
  const tool = run.options.tools.get(call.name);
  if (!tool?.parameters.safeParse(call.arguments).success) return undefined;
  if (tool.pauses) return questionHeld ? undefined : 'question';
  if (tool.requiresApproval && !run.guard.isBlocked(call.name, call.arguments)) return 'approval';
  return undefined;
}

/** Whether a held call is a question or waits for approval, by its tool: a pausing tool's is a question. */
export function holdOfHeld(run: LoopRun, call: ToolCall): Hold {
  return run.options.tools.get(call.name)?.pauses ? 'question' : 'approval';
}

/** Runs one call (or answers it with an error without running) and reports it with `tool_call` events. */
export async function runOne(
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
        context: {
          tenantId: options.tenantId,
          workflowId: options.workflowId,
          step: `${options.callStepPrefix ?? ''}${step}`,
          callId,
        },
        signal: options.signal,
      })
    : {
        result: { content: `Error: invalid arguments: ${parsed.error.message}`, isError: true },
        outcome: 'failed',
      };
  const elapsedMs = performance.now() - started;
  const result = message(execution.result.content, execution.result.isError);
  const warn = recordInGuard(run, call, result);
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

/**
 * Records a call's result in the repeat-fail guard; true when it warns.
 * The guard compares results as persisted (wrapped), so a resumed loop
 * replays it exactly.
 */
export function recordInGuard(run: LoopRun, call: ToolCall, result: ToolResultMessage): boolean {
  return run.guard.record(call.name, call.arguments, {
    isError: result.isError === true,
    content: result.content,
  });
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
