import { stableJson } from '../../stable-json.js';

/**
 * The repeat-fail guard: a call (same tool, same arguments) that failed
 * with the same error twice gets a warning appended to its result, and a
 * third identical attempt is blocked without running. Models stuck on a
 * broken call otherwise burn every iteration on it.
 */

export const REPEAT_WARNING =
  'Warning: this exact call has now failed twice with the same error. Do not repeat it: change the arguments, use another tool, or answer with what you have.';

export function blockedMessage(tool: string): string {
  return `Blocked: this exact ${tool} call already failed twice with the same error, so it was not run again. Change the arguments, use another tool, or answer with what you have.`;
}

export interface RepeatFailGuard {
  /** True when the call failed identically twice already and must not run. */
  isBlocked(tool: string, args: unknown): boolean;
  /** Records an outcome; true when the failure is the second identical one (warn the model). */
  record(tool: string, args: unknown, outcome: { isError: boolean; content: string }): boolean;
}

export function createRepeatFailGuard(): RepeatFailGuard {
  const failures = new Map<string, { content: string; count: number }>();
  return {
    isBlocked(tool, args) {
      return (failures.get(callKey(tool, args))?.count ?? 0) >= 2;
    },
    record(tool, args, outcome) {
      const key = callKey(tool, args);
      if (!outcome.isError) {
        failures.delete(key);
        return false;
      }
      const previous = failures.get(key);
      const count = previous?.content === outcome.content ? previous.count + 1 : 1;
      failures.set(key, { content: outcome.content, count });
      return count === 2;
    },
  };
}

/** Tool name and arguments as JSON with sorted keys: `{a,b}` and `{b,a}` are one call. */
export function callKey(tool: string, args: unknown): string {
  return `${tool}\u0000${stableJson(args)}`;
}
