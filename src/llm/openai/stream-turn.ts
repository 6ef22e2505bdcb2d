import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import { abortedError, LlmError } from '../errors.js';
import { IdleWatchdog } from '../idle-watchdog.js';
import { ArgumentBudget } from '../output-bound.js';
import { providerBody } from '../provider-fetch.js';
import { SseDecoder } from '../sse-decoder.js';
import { toToolCallPart } from '../tool-arguments.js';
import {
  type ModelRequest,
  type StreamOptions,
  type StreamPart,
  tokenCount,
  type Usage,
} from '../types.js';
import { createToolCallAssembler } from './assemble-tool-calls.js';
import { convertRequest } from './convert-messages.js';
import { type ErrorContext, mapError } from './map-error.js';
import { mapFinishReason } from './map-finish-reason.js';

export interface OpenAiModelOptions {
  /** Built by `createOpenAiClient` (SDK retries off). */
  client: OpenAI;
  provider: string;
  modelId: string;
  maxOutputTokens: number;
  /** Longest silence between two chunks before the call counts as timed out. */
  idleTimeoutMs: number;
}

/**
 * One turn against Chat Completions, streamed. Text deltas are yielded as
 * they arrive; tool calls when their choice finishes; then usage and finish.
 * Throws `LlmError` on any failure.
 *
 * The SDK makes the request (its headers, its errors for a refused one)
 * and hands back the raw response; the body's events are decoded here
 * (llm/sse-decoder.ts says why not by the SDK's stream), as the SDK's
 * stream reads them: `[DONE]` ends the chunks, and a chunk carrying an
 * `error` is the provider failing mid-stream (the SDK's `APIError`, so
 * map-error.ts reads it as before).
 *
 * The caller's signal goes to the SDK as it is: the router gives every
 * attempt a signal of its own, so the listener the SDK adds to it (and never
 * removes) goes away with the attempt; aborting it ends the body, and the
 * read of it throws. The idle watchdog ends the body itself (no controller
 * of ours per call), and the timeout is thrown after the loop. With the
 * watchdog folded into this loop, the adapter took ~60 µs more than the
 * bare SDK's stream per 60-chunk call (bench/llm-router's reply, in-process
 * A/B runs); reading the raw response, ~0.2 ms less (2026-12-05).
 */
export async function* streamTurn(
  model: OpenAiModelOptions,
  request: ModelRequest,
  options: StreamOptions,
): AsyncGenerator<StreamPart> {
  const { signal } = options;
  const context: ErrorContext = { provider: model.provider, model: model.modelId, signal };
  let response: Response;
  try {
    response = await model.client.chat.completions
      .create(
        {
          ...convertRequest(request, model),
          stream: true,
          stream_options: { include_usage: true },
        },
        { signal },
      )
      .asResponse();
  } catch (error) {
    throw mapError(error, { ...context, phase: 'request' });
  }
  const body = providerBody(response);
  const watchdog = new IdleWatchdog({ idleMs: model.idleTimeoutMs, abort: () => body.destroy() });
  const events = new SseDecoder();
  const toolCalls = createToolCallAssembler(
    new ArgumentBudget({
      provider: model.provider,
      model: model.modelId,
      maxOutputTokens: model.maxOutputTokens,
    }),
  );
  let providerReason: string | null = null;
  let usage: Usage | undefined;
  let answering = false;
  let done = false;
  try {
    for await (const bytes of body as AsyncIterable<Buffer>) {
      watchdog.received();
      for (const event of events.push(bytes)) {
        // The SDK reads on to the body's end after `[DONE]`, and so do we.
        if (done) continue;
        if (event.data.startsWith('[DONE]')) {
          done = true;
          continue;
        }
        const chunk = chunkOf(event.data, response.headers);
        if (chunk.usage) {
          usage = toUsage(chunk.usage);
          // Reported as it comes: a stream failing after it has still used it.
          options.onUsage?.(usage);
        }
        // We never ask for `n > 1`: only the first choice exists.
        const choice = chunk.choices?.[0];
        // The first text or tool-call fragment is the model answering (not
        // the role-only chunk that may open the stream); a tool call is
        // yielded only when its choice finishes.
        if (!answering && (choice?.delta?.tool_calls?.length || choice?.delta?.content)) {
          answering = true;
          options.onAnswerStart?.();
        }
        // Typed as a string, but the wire is JSON: anything else would become "[object Object]".
        const text: unknown = choice?.delta?.content;
        if (typeof text === 'string' && text !== '') yield { type: 'text-delta', text };
        const toolDeltas = choice?.delta?.tool_calls;
        if (toolDeltas) for (const delta of toolDeltas) toolCalls.add(delta);
        if (choice?.finish_reason) {
          providerReason = choice.finish_reason;
          for (const call of toolCalls.drain()) yield toToolCallPart(call, request.tools);
        }
      }
      watchdog.waiting();
    }
  } catch (error) {
    throw watchdog.fired ? idleTimeout(model) : mapError(error, { ...context, phase: 'stream' });
  } finally {
    watchdog.stop();
  }
  if (watchdog.fired) throw idleTimeout(model);
  if (signal.aborted) throw abortedError(signal, context);
  if (providerReason === null) {
    throw new LlmError({
      kind: 'stream_interrupted',
      provider: model.provider,
      model: model.modelId,
      detail: 'the stream ended without a finish reason',
    });
  }
  // Some compatible servers ignore `include_usage`; then there is no usage to report.
  if (usage) yield { type: 'usage', usage };
  yield { type: 'finish', reason: mapFinishReason(providerReason), providerReason };
}

/**
 * One event's chunk. A chunk with an `error` is the provider failing
 * mid-stream: thrown as the SDK's stream throws it. Unparsable data throws
 * the parser's error (map-error.ts: `stream_interrupted`).
 */
function chunkOf(data: string, headers: Headers): ChatCompletionChunk {
  const chunk = JSON.parse(data) as ChatCompletionChunk & { error?: object };
  if (chunk?.error) throw new OpenAI.APIError(undefined, chunk.error, undefined, headers);
  return chunk;
}

function idleTimeout(model: OpenAiModelOptions): LlmError {
  return new LlmError({
    kind: 'timeout',
    provider: model.provider,
    model: model.modelId,
    detail: `no chunk for ${model.idleTimeoutMs} ms`,
  });
}

function toUsage(usage: NonNullable<ChatCompletionChunk['usage']>): Usage {
  return {
    inputTokens: tokenCount(usage.prompt_tokens),
    cachedInputTokens: tokenCount(usage.prompt_tokens_details?.cached_tokens),
    outputTokens: tokenCount(usage.completion_tokens),
    cacheWriteTokens: 0,
  };
}
