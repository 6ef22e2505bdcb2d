import type { ProviderKind } from './catalogue.js';
import {
  estimateRequestTokens,
  type TokenCounts,
  upperBoundRequestTokens,
} from './estimate-tokens.js';
import type { ModelRequest } from './types.js';

/**
 * The output a request may ask of the model that receives it. Providers
 * refuse a request whose input and `max_tokens` together pass the window
 * (Anthropic "input length and `max_tokens` exceed context limit", OpenAI
 * "maximum context length is N tokens. However, you requested M tokens")
 * even when the answer would have been short; asking for the model's
 * whole output (64,000 tokens of a Claude model's 200,000) had that
 * refusal come at ~68% of the window, before any of the tool loop's
 * thresholds. The router fits every attempt's request to its own model
 * (router/turn.ts): a fallback has a window and a maximum output of its
 * own, and the request fitted to the workflow's model did not fit it.
 */

/**
 * The least output a request asks for, however little room its input
 * leaves: less would cut off the answer or tool call of the turn, which
 * nothing recovers from, where a request refused for its length is
 * condensed and tried again (the tool loop's recoverFromOverflow) or fails
 * plainly.
 */
export const MIN_OUTPUT_TOKENS = 1024;

/**
 * Tokens a provider counts that the request's text does not show: the
 * tool-use instructions Anthropic adds to the system prompt when tools are
 * offered (~350 tokens for Claude) and OpenAI's own rendering of tool
 * definitions and message framing.
 */
export const UNSEEN_INPUT_TOKENS = 512;

/**
 * A request's input tokens as a provider kind counts them
 * (estimate-tokens.ts): the estimate (`exact`), or a cheaper bound above it.
 */
export interface InputEstimate {
  kind: ProviderKind;
  tokens: number;
  exact: boolean;
}

/** What bounds a request's output: the model's catalogue entry. */
export interface OutputLimits {
  contextWindow: number;
  maxOutputTokens: number;
}

export interface OutputRoom {
  /** What the request asks for: what it asked (the model's maximum when nothing), within the room. */
  maxOutputTokens: number;
  /**
   * False when the window holds the input but not the least output
   * (MIN_OUTPUT_TOKENS, or what the request asked when less): by the
   * estimate, the model refuses the request for its length.
   */
  fits: boolean;
  /** The input as counted here, for the next model of the same kind. */
  input: InputEstimate;
}

/**
 * The output `request` asks of a model with `limits`: what it asked, or
 * the model's whole maximum, while its input leaves room for that; else
 * the room its input leaves, and never less than the floor. The input is
 * estimated from above, and exactly only when the cheap bound says it
 * might not leave the room asked for; `input`, an estimate of the same
 * request for the same kind, spares both.
 */
export function outputRoom(options: {
  request: ModelRequest;
  limits: OutputLimits;
  /** The kind of the model's provider: whose tokens it counts. */
  kind: ProviderKind;
  input?: InputEstimate;
  /** Exact counts the caller keeps across its requests (estimate-tokens.ts). */
  tokenCounts?: TokenCounts;
}): OutputRoom {
  const { request, limits, kind } = options;
  const wanted = Math.min(
    request.maxOutputTokens ?? limits.maxOutputTokens,
    limits.maxOutputTokens,
  );
  const roomFor = (tokens: number) => limits.contextWindow - tokens - UNSEEN_INPUT_TOKENS;
  let input =
    options.input?.kind === kind
      ? options.input
      : // Other kinds are estimated at 3.5 characters a token: the bound is the estimate.
        { kind, tokens: upperBoundRequestTokens(request, kind), exact: kind !== 'openai' };
  if (roomFor(input.tokens) >= wanted) return { maxOutputTokens: wanted, fits: true, input };
  if (!input.exact) {
    input = {
      kind,
      tokens: estimateRequestTokens(request, kind, options.tokenCounts),
      exact: true,
    };
  }
  const room = roomFor(input.tokens);
  if (room >= wanted) return { maxOutputTokens: wanted, fits: true, input };
  const floor = Math.min(wanted, MIN_OUTPUT_TOKENS);
  return { maxOutputTokens: Math.max(floor, room), fits: room >= floor, input };
}
