import Anthropic from '@anthropic-ai/sdk';
import { abortedError, LlmError } from '../errors.js';
import { IdleWatchdog } from '../idle-watchdog.js';
import { ArgumentBudget } from '../output-bound.js';
import { providerBody } from '../provider-fetch.js';
import { SseDecoder, type SseEvent } from '../sse-decoder.js';
import type { ModelRequest, StreamOptions, StreamPart } from '../types.js';
import { toMessageParams } from './convert-messages.js';
import { type ErrorContext, mapError } from './map-error.js';
import { createEventReader } from './read-events.js';

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
 *
 * As in the OpenAI adapter, the SDK makes the request and hands back the
 * raw response, whose events are decoded here (llm/sse-decoder.ts says why
 * not by the SDK's stream) and read as the SDK's stream reads them
 * (`eventOf`); the caller's signal (the router's per-attempt one) goes to
 * the SDK as it is, and the idle watchdog ends the body itself: no
 * controller of ours per call.
 */
export async function* streamTurn(
  options: AnthropicModelOptions,
  request: ModelRequest,
  streamOptions: StreamOptions,
): AsyncGenerator<StreamPart> {
  const { signal } = streamOptions;
  const context: ErrorContext = { provider: options.provider, model: options.modelId, signal };
  let response: Response;
  try {
    response = await options.client.messages
      .create({ ...toMessageParams(request, options), stream: true }, { signal })
      .asResponse();
  } catch (error) {
    throw mapError(error, { ...context, phase: 'request' });
  }
  const body = providerBody(response);
  const watchdog = new IdleWatchdog({ idleMs: options.idleTimeoutMs, abort: () => body.destroy() });
  const decoder = new SseDecoder();
  const reader = createEventReader(
    request.tools,
    new ArgumentBudget({
      provider: options.provider,
      model: options.modelId,
      maxOutputTokens: options.maxOutputTokens,
    }),
  );
  // `message_start` opens every stream before the model has written
  // anything, and `ping` keeps it alive meanwhile: the answer starts with
  // the first content block (text, or a tool call whose input may stream
  // long after).
  let answering = false;
  try {
    for await (const bytes of body as AsyncIterable<Buffer>) {
      watchdog.received();
      for (const sse of decoder.push(bytes)) {
        const event = eventOf(sse, response.headers);
        if (!event) continue;
        if (!answering && event.type === 'content_block_start') {
          answering = true;
          streamOptions.onAnswerStart?.();
        }
        const part = reader.read(event);
        // Reported as it comes: a stream failing after it has still used it.
        if (event.type === 'message_start' || event.type === 'message_delta')
          streamOptions.onUsage?.(reader.usage());
        if (part) yield part;
      }
      watchdog.waiting();
    }
  } catch (error) {
    throw watchdog.fired ? idleTimeout(options) : mapError(error, { ...context, phase: 'stream' });
  } finally {
    watchdog.stop();
  }
  if (watchdog.fired) throw idleTimeout(options);
  if (signal.aborted) throw abortedError(signal, context);
  yield* reader.end(context);
}

/**
 * One server-sent event as the SDK's stream reads it: `ping` and events
 * without a name are skipped, an `error` event is the provider failing
 * mid-stream (the SDK's `APIError`, so map-error.ts reads it as before),
 * and any other event's data is the raw event (unparsable data throws the
 * parser's error: `stream_interrupted`).
 */
function eventOf(sse: SseEvent, headers: Headers): Anthropic.RawMessageStreamEvent | undefined {
  if (sse.event === null || sse.event === 'ping') return undefined;
  if (sse.event === 'error') {
    const body = parsedOrText(sse.data);
    const type = (body as { error?: { type?: unknown } } | null)?.error?.type;
    throw new Anthropic.APIError(
      undefined,
      body as object,
      undefined,
      headers,
      typeof type === 'string' ? (type as Anthropic.ErrorType) : undefined,
    );
  }
  if (!sse.data) return undefined;
  return JSON.parse(sse.data) as Anthropic.RawMessageStreamEvent;
}

/** The data as JSON, or as the text it is when it is not JSON. */
function parsedOrText(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return data;
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
