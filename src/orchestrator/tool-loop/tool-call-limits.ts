import type { ToolResultMessage } from '../../llm/types.js';
import { turnStep } from './call-model.js';
import type { LoopRun, PendingCall } from './types.js';

/**
 * The bounds on one turn's tool calls. Without them a model (or text
 * injected through a tool's output) that makes 200 calls in a turn fires
 * 200 requests at once at a tenant's endpoints, and the turn's results,
 * events and trace grow with whatever it asks.
 */

/** How many calls a turn may make, and how many of its parallel calls run at once. */
export interface ToolCallLimits {
  maxPerTurn: number;
  concurrency: number;
}

/**
 * What a call past the cap gets as its result. Not wrapped as untrusted
 * tool output, as a declined call's is not (held-calls.ts): no tool wrote
 * it. So it is told apart from any tool's output by its start (a wrapped
 * one starts with its tag), which the resume relies on (`isOverCapResult`).
 */
const OVER_CAP_START = 'Not run: this turn made more than';

export function overCapMessage(maxPerTurn: number): string {
  return `${OVER_CAP_START} ${maxPerTurn} tool calls, so only its first ${maxPerTurn} were handled. Make at most ${maxPerTurn} calls per turn; make this one in a later turn if you still need it.`;
}

/** A persisted result of a call past the cap: it did not run, so the repeat-fail guard never saw it. */
export function isOverCapResult(content: string): boolean {
  return content.startsWith(OVER_CAP_START);
}

/**
 * The results of the calls past the cap, which do not run, and one
 * `warning` for the turn (a `tool_call` event each would let the event
 * log and the trace grow with the calls made). Every call the model made
 * counts, in its order: invalid ones (each costs a result and an event
 * as a valid one does) and those held for the user (each past the cap
 * would be one more pause: 200 calls to approve, 200 pauses). The rule is
 * then one the model can follow as told, at most N calls, and the first N
 * are handled exactly as in a turn under the cap. Calls past it are not
 * recorded in the repeat-fail guard: they did not fail, they did not run.
 */
export function refuseOverCap(run: LoopRun, calls: PendingCall[]): ToolResultMessage[] {
  const { maxPerTurn } = run.options.toolCalls;
  const content = overCapMessage(maxPerTurn);
  run.options.tracker.enqueue('warning', turnStep(run.turns), 'info', {
    code: 'tool_call_cap',
    message: `The turn made ${calls.length} tool calls; only the first ${maxPerTurn} were handled, the others were answered without running.`,
    maxCallsPerTurn: maxPerTurn,
    calls: calls.length,
  });
  return calls.slice(maxPerTurn).map((pending) => ({
    role: 'tool',
    toolCallId: pending.kind === 'valid' ? pending.call.id : pending.id,
    toolName: pending.kind === 'valid' ? pending.call.name : pending.name,
    content,
    isError: true,
  }));
}

/**
 * Runs `task` on every item, at most `limit` at once: the next starts as
 * one ends. Within the limit every task starts at once, through the very
 * `Promise.all` the loop used before there was a limit, no async frame
 * around it: the common turn of a few calls pays nothing more.
 */
export function forEachAtMost<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<unknown> {
  return items.length <= limit ? Promise.all(items.map(task)) : inTurns(items, limit, task);
}

/** `limit` workers taking the next item as each ends its own; once a task throws no other starts. */
async function inTurns<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const item = items[next++] as T;
      try {
        await task(item);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: limit }, worker));
}
