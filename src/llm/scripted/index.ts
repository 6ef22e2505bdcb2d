import { estimateRequestTokens, estimateTextTokens } from '../estimate-tokens.js';
import { toToolCallPart } from '../tool-arguments.js';
import type { FinishReason, LanguageModel, ModelRequest, StreamPart } from '../types.js';
import { pause, throwIfAborted } from './pause.js';
import { replyTo } from './reply.js';
import { splitIntoTokens, truncateToTokens } from './tokenize.js';

export { CLASSIFY_MARKER, PLAN_MARKER } from './markers.js';

export const SCRIPTED_PROVIDER = 'scripted';
export const DEFAULT_SCRIPTED_MODEL_ID = 'scripted';

export interface ScriptedModelOptions {
  modelId?: string;
  /** Pause between streamed tokens, to make progress visible in demos and tests; 0 by default. */
  tokenDelayMs?: number;
}

/**
 * An offline, deterministic model: the same request always streams the
 * same parts. It classifies, plans, calls the built-in tools by keyword
 * rules and answers with a short text marked `[scripted model]`, so the
 * whole service runs with no provider key.
 */
export function scriptedModel(options: ScriptedModelOptions = {}): LanguageModel {
  const modelId = options.modelId ?? DEFAULT_SCRIPTED_MODEL_ID;
  const tokenDelayMs = options.tokenDelayMs ?? 0;
  if (!Number.isFinite(tokenDelayMs) || tokenDelayMs < 0) {
    throw new RangeError(`tokenDelayMs must be a finite number >= 0, got ${tokenDelayMs}`);
  }
  return {
    provider: SCRIPTED_PROVIDER,
    modelId,
    stream: (request, { signal }) => streamReply({ request, signal, modelId, tokenDelayMs }),
  };
}

interface Turn {
  request: ModelRequest;
  signal: AbortSignal;
  modelId: string;
  tokenDelayMs: number;
}

async function* streamReply(turn: Turn): AsyncGenerator<StreamPart> {
  throwIfAborted(turn.signal, turn.modelId);
  const reply = replyTo(turn.request);
  const inputTokens = estimateRequestTokens(turn.request, 'scripted');
  if (reply.kind === 'tool_calls') {
    for (const call of reply.calls) yield toToolCallPart(call, turn.request.tools);
    const emitted = reply.calls.map((call) => call.name + call.rawArguments).join('');
    yield usagePart(inputTokens, estimateTextTokens(emitted, 'scripted'));
    yield finishPart('tool_calls');
    return;
  }
  const limit = turn.request.maxOutputTokens;
  const { text, truncated } =
    limit === undefined
      ? { text: reply.text, truncated: false }
      : truncateToTokens(reply.text, limit);
  yield* streamText(text, turn);
  yield usagePart(inputTokens, estimateTextTokens(text, 'scripted'));
  yield finishPart(truncated ? 'length' : 'stop');
}

async function* streamText(text: string, turn: Turn): AsyncGenerator<StreamPart> {
  for (const [index, token] of splitIntoTokens(text).entries()) {
    if (index > 0 && turn.tokenDelayMs > 0) {
      await pause({ ms: turn.tokenDelayMs, signal: turn.signal, model: turn.modelId });
    }
    throwIfAborted(turn.signal, turn.modelId);
    yield { type: 'text-delta', text: token };
  }
}

function usagePart(inputTokens: number, outputTokens: number): StreamPart {
  return {
    type: 'usage',
    usage: { inputTokens, outputTokens, cachedInputTokens: 0, cacheWriteTokens: 0 },
  };
}

function finishPart(reason: FinishReason): StreamPart {
  return { type: 'finish', reason, providerReason: reason };
}
