import type Anthropic from '@anthropic-ai/sdk';
import { LlmError } from '../errors.js';
import { withIdleWatchdog } from '../idle-watchdog.js';
import { toToolCallPart } from '../tool-arguments.js';
import type { ModelRequest, StreamOptions, StreamPart, ToolDefinition, Usage } from '../types.js';
import { toMessageParams } from './convert-messages.js';
import { abortedError, type ErrorContext, mapError } from './map-error.js';
import { mapFinishReason } from './map-finish-reason.js';

export interface AnthropicModelOptions {
  /** Built by `createAnthropicClient`; tests point it at the fake provider server. */
  client: Anthropic;
  /** Name of the configured provider, usually `anthropic`. */
  provider: string;
  modelId: string;
  /** The model's maximum output; caps the request's `maxOutputTokens`. */
  maxOutputTokens: number;
  /** A stream silent for this long is aborted and reported as a timeout. */
  idleTimeoutMs: number;
}

/**
 * One turn against the Messages API, streamed: raw events in, our stream
 * parts out. Throws `LlmError` on any failure, before or during the stream.
 */
export async function* streamTurn(
  options: AnthropicModelOptions,
  request: ModelRequest,
  streamOptions: StreamOptions,
): AsyncGenerator<StreamPart> {
  // Our own controller, so the idle watchdog can abort with its own reason.
  const controller = new AbortController();
  const forwardAbort = () => controller.abort(streamOptions.signal.reason);
  if (streamOptions.signal.aborted) forwardAbort();
  else streamOptions.signal.addEventListener('abort', forwardAbort, { once: true });
  const context: ErrorContext = {
    provider: options.provider,
    model: options.modelId,
    signal: controller.signal,
  };
  try {
    const params = toMessageParams(request, options);
    let events: AsyncIterable<Anthropic.RawMessageStreamEvent>;
    try {
      events = await options.client.messages.create(
        { ...params, stream: true },
        { signal: controller.signal },
      );
    } catch (error) {
      throw mapError(error, { ...context, phase: 'request' });
    }
    const watched = withIdleWatchdog(events, {
      idleMs: options.idleTimeoutMs,
      onIdle: () => controller.abort(idleTimeout(options)),
    });
    try {
      yield* readEvents(watched, request.tools, context);
    } catch (error) {
      throw mapError(error, { ...context, phase: 'stream' });
    }
  } finally {
    streamOptions.signal.removeEventListener('abort', forwardAbort);
  }
}

function idleTimeout(options: AnthropicModelOptions): LlmError {
  return new LlmError({
    kind: 'timeout',
    provider: options.provider,
    model: options.modelId,
    detail: `no stream event for ${options.idleTimeoutMs} ms`,
  });
}

interface OpenToolCall {
  id: string;
  name: string;
  rawArguments: string;
}

/**
 * Turns the raw events into parts: text deltas as they come, each
 * `tool_use` block once it is complete, then usage and finish after
 * `message_stop`.
 */
async function* readEvents(
  events: AsyncIterable<Anthropic.RawMessageStreamEvent>,
  tools: ToolDefinition[] | undefined,
  context: ErrorContext,
): AsyncGenerator<StreamPart> {
  const toolCalls = new Map<number, OpenToolCall>();
  const counts: EventUsage = {
    input_tokens: 0,
    output_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation_input_tokens: 0,
  };
  let stopReason: string | null = null;
  let stopped = false;
  for await (const event of events) {
    switch (event.type) {
      case 'message_start':
        addUsage(counts, event.message.usage);
        break;
      case 'content_block_start':
        if (event.content_block.type === 'tool_use') {
          const { id, name } = event.content_block;
          toolCalls.set(event.index, { id, name, rawArguments: '' });
        }
        break;
      case 'content_block_delta':
        if (event.delta.type === 'text_delta' && event.delta.text !== '')
          yield { type: 'text-delta', text: event.delta.text };
        else if (event.delta.type === 'input_json_delta') {
          const call = toolCalls.get(event.index);
          if (call) call.rawArguments += event.delta.partial_json;
        }
        break;
      case 'content_block_stop': {
        const call = toolCalls.get(event.index);
        if (call) {
          toolCalls.delete(event.index);
          yield toToolCallPart(call, tools);
        }
        break;
      }
      case 'message_delta':
        stopReason = event.delta.stop_reason ?? stopReason;
        addUsage(counts, event.usage);
        break;
      case 'message_stop':
        stopped = true;
        break;
    }
  }
  // The SDK ends the iteration quietly when the call is aborted.
  if (context.signal?.aborted) throw abortedError(context.signal, context);
  if (!stopped)
    throw new LlmError({
      kind: 'stream_interrupted',
      provider: context.provider,
      model: context.model,
      detail: 'the event stream ended before message_stop',
    });
  yield { type: 'usage', usage: toUsage(counts) };
  yield { type: 'finish', reason: mapFinishReason(stopReason), providerReason: stopReason };
}

type EventUsage = Pick<
  Anthropic.MessageDeltaUsage,
  'input_tokens' | 'output_tokens' | 'cache_read_input_tokens' | 'cache_creation_input_tokens'
>;

/**
 * `message_start` carries the input side, `message_delta` the (cumulative)
 * output count and, on newer servers, the input side again: the latest
 * value of each field wins.
 */
function addUsage(counts: EventUsage, from: EventUsage): void {
  counts.input_tokens = from.input_tokens ?? counts.input_tokens;
  counts.output_tokens = from.output_tokens ?? counts.output_tokens;
  counts.cache_read_input_tokens = from.cache_read_input_tokens ?? counts.cache_read_input_tokens;
  counts.cache_creation_input_tokens =
    from.cache_creation_input_tokens ?? counts.cache_creation_input_tokens;
}

/** Anthropic's `input_tokens` leaves out cached tokens; ours counts every input token. */
function toUsage(counts: EventUsage): Usage {
  const cachedInputTokens = counts.cache_read_input_tokens ?? 0;
  const cacheWriteTokens = counts.cache_creation_input_tokens ?? 0;
  return {
    inputTokens: (counts.input_tokens ?? 0) + cachedInputTokens + cacheWriteTokens,
    outputTokens: counts.output_tokens,
    cachedInputTokens,
    cacheWriteTokens,
  };
}
