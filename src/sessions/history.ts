import type { ProviderKind } from '../llm/catalogue.js';
import { estimateMessageTokens } from '../llm/estimate-tokens.js';
import type { Message } from '../llm/types.js';
import type { SessionRole } from './types.js';

export interface HistoryOptions {
  /** The history's share of the prompt, in estimated tokens. */
  budgetTokens: number;
  /** Question-and-answer pairs kept from the end even when they alone exceed the budget. */
  floorTurns: number;
  /** Whose tokeniser the estimate follows. */
  kind: ProviderKind;
}

export interface HistoryMessage {
  role: SessionRole;
  content: string;
}

/**
 * The latest part of a session's history that fits the token budget, as
 * model messages in their original order. The history is cut between
 * pairs, never inside one: a pair is a question with the answers that
 * follow it, so the model never sees an answer without its question. The
 * oldest pairs go first; the last `floorTurns` pairs stay even over
 * budget, because a follow-up question ("and the second one?") is
 * meaningless without them. Blank messages carry nothing and are left out,
 * and a question whose answer was blank goes with it: kept, it would run
 * into the next question as if one.
 */
export function trimHistory(
  messages: readonly HistoryMessage[],
  options: HistoryOptions,
): Message[] {
  const pairs = splitIntoPairs(messages)
    .map((pair) => pair.filter((message) => !isBlank(message)))
    .filter((pair) => pair[0]?.role === 'user' && pair.length > 1);
  const kept: Message[][] = [];
  let usedTokens = 0;
  for (let index = pairs.length - 1; index >= 0; index--) {
    const pair = (pairs[index] as HistoryMessage[]).map(toModelMessage);
    const tokens = pair.reduce(
      (sum, message) => sum + estimateMessageTokens(message, options.kind),
      0,
    );
    if (kept.length >= options.floorTurns && usedTokens + tokens > options.budgetTokens) break;
    kept.push(pair);
    usedTokens += tokens;
  }
  return kept.reverse().flat();
}

/** Each pair starts at a user message; messages before the first one form a pair of their own. */
function splitIntoPairs(messages: readonly HistoryMessage[]): HistoryMessage[][] {
  const pairs: HistoryMessage[][] = [];
  for (const message of messages) {
    const current = pairs.at(-1);
    if (message.role === 'user' || !current) pairs.push([message]);
    else current.push(message);
  }
  return pairs;
}

function toModelMessage(message: HistoryMessage): Message {
  return message.role === 'user'
    ? { role: 'user', content: message.content }
    : { role: 'assistant', content: message.content, toolCalls: [] };
}

/** How far back messages read newest first reach: the pairs they begin, their estimated tokens. */
export interface HistoryReach {
  pairs: number;
  tokens: number;
}

/** `reach` extended by older messages, newest first (blank ones count for nothing, as in trimHistory). */
export function extendReach(
  reach: HistoryReach,
  olderNewestFirst: readonly HistoryMessage[],
  kind: ProviderKind,
): HistoryReach {
  let { pairs, tokens } = reach;
  for (const message of olderNewestFirst) {
    if (isBlank(message)) continue;
    if (message.role === 'user') pairs += 1;
    tokens += estimateMessageTokens(toModelMessage(message), kind);
  }
  return { pairs, tokens };
}

/**
 * Whether messages read backwards from the end reach as far back as
 * `trimHistory` can keep, so that older ones need not be read: they hold
 * the floor's pairs whole and exceed the budget. (The oldest message read
 * may be the tail of a pair whose question is older still; that pair, at
 * least as large as its tail, would not fit either.)
 */
export function historyIsComplete(reach: HistoryReach, options: HistoryOptions): boolean {
  return reach.pairs >= options.floorTurns && reach.tokens > options.budgetTokens;
}

function isBlank(message: HistoryMessage): boolean {
  return !/\S/.test(message.content);
}
