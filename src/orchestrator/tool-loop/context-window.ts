import type { ProviderKind } from '../../llm/catalogue.js';
import {
  estimateRequestTokens,
  type TokenCounts,
  upperBoundRequestTokens,
} from '../../llm/estimate-tokens.js';
import type { InputEstimate } from '../../llm/output-room.js';
import type { Message, ModelRequest } from '../../llm/types.js';

/**
 * Keeps a loop's requests inside the model's context window. Thresholds
 * are shares of the window, estimated before each call (estimate-tokens):
 * at 70% the model is told to wrap up, at 80% the tool results of earlier
 * turns are condensed to one line each, and after a context-length error
 * every tool result is condensed until the request is under 60%.
 * Condensing keeps each call and its result, so no call is left dangling.
 * The router caps each attempt's output to the room its input leaves in
 * that model's window (llm/output-room.ts), so the thresholds need set
 * none aside.
 */

export const WRAP_UP_SHARE = 0.7;
export const CONDENSE_SHARE = 0.8;
export const RECOVER_SHARE = 0.6;

export const WRAP_UP_INSTRUCTION =
  'The conversation is close to the model’s context limit. Make at most one more tool call if it is essential, then answer with what you have gathered.';

export interface ContextLimits {
  contextWindow: number;
  kind: ProviderKind;
  /** The run's token counts so far, reused by each turn's estimate. */
  tokenCounts?: TokenCounts;
}

/**
 * The request's share of the window, as compared with the thresholds
 * above. Below the lowest of them by an upper bound, the exact count would
 * change no decision, so it is not made: tokenising every request was the
 * largest CPU cost of starting a turn (bench/pipeline, stage prompts).
 */
export function estimateShare(request: ModelRequest, limits: ContextLimits): number {
  return estimateInput(request, limits).tokens / limits.contextWindow;
}

/**
 * The request's input tokens as estimateShare counts them: for OpenAI, an
 * upper bound (`exact` false) while that is below the lowest threshold,
 * else the estimate. Handed to the router with the same request, it spares the
 * router's output room (llm/output-room.ts) a second pass over the
 * conversation.
 */
export function estimateInput(request: ModelRequest, limits: ContextLimits): InputEstimate {
  const { kind } = limits;
  const bound = upperBoundRequestTokens(request, kind);
  // Other kinds are estimated at 3.5 characters a token: the bound is the estimate.
  if (kind !== 'openai') return { kind, tokens: bound, exact: true };
  if (bound < RECOVER_SHARE * limits.contextWindow) return { kind, tokens: bound, exact: false };
  return { kind, tokens: estimateRequestTokens(request, kind, limits.tokenCounts), exact: true };
}

/**
 * Condenses tool results, oldest first, until the request built from the
 * messages is under `share` of the window or nothing is left to condense.
 * With `keepLatest`, the results of the latest turn stay whole. Returns the
 * new messages (the input is not changed) and how many were condensed.
 */
export function condenseToolResults(input: {
  messages: readonly Message[];
  buildRequest: (messages: Message[]) => ModelRequest;
  limits: ContextLimits;
  share: number;
  keepLatest: boolean;
}): { messages: Message[]; condensed: number } {
  const messages = [...input.messages];
  const lastAssistant = messages.findLastIndex((message) => message.role === 'assistant');
  const end = input.keepLatest ? lastAssistant : messages.length;
  let condensed = 0;
  for (let index = 0; index < end; index++) {
    if (estimateShare(input.buildRequest(messages), input.limits) < input.share) break;
    const message = messages[index];
    if (message?.role !== 'tool' || isCondensed(message.content)) continue;
    messages[index] = { ...message, content: condensedLine(message.toolName, message) };
    condensed += 1;
  }
  return { messages, condensed };
}

const CONDENSED_PREFIX = '[condensed earlier result]';

function isCondensed(content: string): boolean {
  return content.startsWith(CONDENSED_PREFIX);
}

/** One line: the tool, whether it failed, its size, and the start of its data. */
export function condensedLine(
  toolName: string,
  message: { content: string; isError?: boolean },
): string {
  const data = dataOf(message.content).replace(/\s+/g, ' ').trim();
  const head = data.length > 120 ? `${data.slice(0, 119)}…` : data;
  const outcome = message.isError ? 'failed' : 'returned';
  return `${CONDENSED_PREFIX} ${toolName} ${outcome} ${data.length} characters: ${head}`;
}

/** The data inside a wrapped tool result (see wrapUntrustedOutput): without the tags and the notice. */
function dataOf(content: string): string {
  const lines = content.split('\n');
  const wrapped = lines[0]?.startsWith('<tool_output') === true;
  if (!wrapped) return content;
  const closing = lines.findIndex((line, index) => index > 0 && line.startsWith('</tool_output>'));
  return lines.slice(2, closing === -1 ? undefined : closing).join('\n');
}
