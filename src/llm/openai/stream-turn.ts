import type OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import { LlmError } from '../errors.js';
import { withIdleWatchdog } from '../idle-watchdog.js';
import { toToolCallPart } from '../tool-arguments.js';
import type { ModelRequest, StreamOptions, StreamPart, Usage } from '../types.js';
import { createToolCallAssembler } from './assemble-tool-calls.js';
import { convertRequest } from './convert-messages.js';
import { abortedError, type ErrorContext, mapError } from './map-error.js';
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
 */
export async function* streamTurn(
  model: OpenAiModelOptions,
  request: ModelRequest,
  options: StreamOptions,
): AsyncGenerator<StreamPart> {
  // Our own controller: the watchdog aborts it with a reason, never the caller's signal.
  const controller = new AbortController();
  const forwardAbort = () => controller.abort(options.signal.reason);
  if (options.signal.aborted) forwardAbort();
  else options.signal.addEventListener('abort', forwardAbort, { once: true });
  const context: ErrorContext = {
    provider: model.provider,
    model: model.modelId,
    signal: controller.signal,
  };
  try {
    let stream: AsyncIterable<ChatCompletionChunk>;
    try {
      stream = await model.client.chat.completions.create(
        {
          ...convertRequest(request, model),
          stream: true,
          stream_options: { include_usage: true },
        },
        { signal: controller.signal },
      );
    } catch (error) {
      throw mapError(error, { ...context, phase: 'request' });
    }
    const watched = withIdleWatchdog(stream, {
      idleMs: model.idleTimeoutMs,
      onIdle: () =>
        controller.abort(
          new LlmError({
            kind: 'timeout',
            provider: model.provider,
            model: model.modelId,
            detail: `no chunk for ${model.idleTimeoutMs} ms`,
          }),
        ),
    });
    const toolCalls = createToolCallAssembler();
    let providerReason: string | null = null;
    let usage: Usage | undefined;
    try {
      for await (const chunk of watched) {
        if (chunk.usage) usage = toUsage(chunk.usage);
        // We never ask for `n > 1`: only the first choice exists.
        const choice = chunk.choices[0];
        if (!choice) continue;
        if (choice.delta?.content) yield { type: 'text-delta', text: choice.delta.content };
        for (const delta of choice.delta?.tool_calls ?? []) toolCalls.add(delta);
        if (choice.finish_reason) {
          providerReason = choice.finish_reason;
          for (const call of toolCalls.drain()) yield toToolCallPart(call, request.tools);
        }
      }
    } catch (error) {
      throw mapError(error, { ...context, phase: 'stream' });
    }
    // The SDK ends the stream quietly when it is aborted.
    if (controller.signal.aborted) throw abortedError(controller.signal, context);
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
  } finally {
    options.signal.removeEventListener('abort', forwardAbort);
  }
}

function toUsage(usage: NonNullable<ChatCompletionChunk['usage']>): Usage {
  return {
    inputTokens: usage.prompt_tokens,
    cachedInputTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    outputTokens: usage.completion_tokens,
    cacheWriteTokens: 0,
  };
}
