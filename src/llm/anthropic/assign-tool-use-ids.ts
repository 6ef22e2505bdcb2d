import type { ToolCall } from '../types.js';

/**
 * The Messages API checks the ids of the `tool_use` blocks it is sent: each
 * must match ^[a-zA-Z0-9_-]+$ and be unique in the request, or the call is
 * refused with a 400. Waymark's history also holds ids other providers made:
 * openai/assemble-tool-calls.ts names the calls of a server that sends none
 * `call_<index>`, so every turn's first call may be `call_0`, and some
 * OpenAI-compatible servers send ids such as `functions.lookup:0`. A
 * workflow that falls back to a Claude model sends that history.
 *
 * So the ids are rewritten for each request, in the conversion only: the
 * history keeps the ids it has. The rewrite of a message depends only on
 * the messages before it, so a turn's ids read the same in every later
 * request and the prompt cache still matches; ids Anthropic takes as they
 * are (its own `toolu_...`) come out unchanged.
 */

const DISALLOWED_CHARACTER = /[^a-zA-Z0-9_-]/g;

/** The id with each character Anthropic does not take replaced; an empty one named. */
function fitted(id: string): string {
  return id.replace(DISALLOWED_CHARACTER, '_') || 'call';
}

export interface ToolUseIds {
  /** One assistant turn's calls as they are sent: copies where the id changes. */
  forCalls(calls: readonly ToolCall[]): ToolCall[];
  /** The id a tool result refers to: that of the latest turn's call it answers. */
  forResult(id: string): string;
}

/** One per request: it remembers the ids already given out. */
export function createToolUseIds(): ToolUseIds {
  const used = new Set<string>();
  // The latest assistant turn's ids by the id in our history, in call order:
  // one turn may repeat an id, and its results answer them in that order.
  let unanswered = new Map<string, string[]>();
  const latest = new Map<string, string>();
  const assign = (id: string): string => {
    const base = fitted(id);
    let candidate = base;
    for (let n = 2; used.has(candidate); n++) candidate = `${base}_${n}`;
    used.add(candidate);
    return candidate;
  };
  return {
    forCalls(calls) {
      unanswered = new Map();
      return calls.map((call) => {
        const sent = assign(call.id);
        const queue = unanswered.get(call.id);
        if (queue) queue.push(sent);
        else unanswered.set(call.id, [sent]);
        latest.set(call.id, sent);
        return sent === call.id ? call : { ...call, id: sent };
      });
    },
    forResult(id) {
      // Past the latest turn's calls, the id its call was last sent with; with no
      // call at all, Anthropic refuses the result whatever its id, so a fitted one.
      return unanswered.get(id)?.shift() ?? latest.get(id) ?? fitted(id);
    },
  };
}
