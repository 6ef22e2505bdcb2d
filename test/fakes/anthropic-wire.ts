import { anthropicRefusal } from './anthropic-request-checks.js';
import type {
  FakeErrorType,
  FakeFinishReason,
  FakeReply,
  FakeToolCall,
  FakeUsage,
} from './provider-types.js';
import {
  argumentPieces,
  argumentsText,
  contentFrame,
  DEFAULT_USAGE,
  type Frame,
  finishReason,
  type ReplyContext,
  replyChunks,
  sseEvent,
  structureFrame,
  usageOf,
  type VendorWire,
} from './wire.js';

/**
 * Anthropic Messages (`POST /v1/messages`): `message` bodies, named SSE
 * events from `message_start` to `message_stop`, and
 * `{type:'error', error:{type, message}}` errors.
 */

interface AnthropicError {
  type: string;
  message: string;
}

const ERRORS: Record<FakeErrorType, AnthropicError> = {
  rate_limit: {
    type: 'rate_limit_error',
    message:
      'Number of request tokens has exceeded your per-minute rate limit; see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.',
  },
  overloaded: { type: 'overloaded_error', message: 'Overloaded' },
  server: { type: 'api_error', message: 'Internal server error' },
  context_length: {
    type: 'invalid_request_error',
    message: 'prompt is too long: 210000 tokens > 200000 maximum',
  },
  invalid_request: { type: 'invalid_request_error', message: 'Invalid request (fake provider).' },
  authentication: { type: 'authentication_error', message: 'invalid x-api-key' },
};

const STOP_REASONS: Record<FakeFinishReason, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  content_filter: 'refusal',
};

function messageId(context: ReplyContext): string {
  return `msg_fake${context.seq}`;
}

function toolUseId(call: FakeToolCall, context: ReplyContext, index: number): string {
  return call.id ?? `toolu_fake${context.seq}_${index}`;
}

/** Malformed raw arguments cannot become an object; the raw text goes out as `input` instead. */
function toolInput(call: FakeToolCall): unknown {
  if (typeof call.arguments !== 'string') return call.arguments;
  try {
    return JSON.parse(call.arguments);
  } catch {
    return call.arguments;
  }
}

function inputUsage(usage: FakeUsage) {
  return {
    input_tokens: usage.input,
    cache_creation_input_tokens: usage.cacheWrite ?? 0,
    cache_read_input_tokens: usage.cacheRead ?? 0,
  };
}

/** A text block goes first when there is text, or when there is nothing else to say. */
function hasTextBlock(chunks: string[], reply: FakeReply): boolean {
  return chunks.length > 0 || !reply.toolCalls?.length;
}

function replyBody(reply: FakeReply, context: ReplyContext) {
  const chunks = replyChunks(reply);
  const usage = usageOf(reply);
  const toolCalls = reply.toolCalls ?? [];
  return {
    id: messageId(context),
    type: 'message',
    role: 'assistant',
    model: context.model,
    content: [
      ...(hasTextBlock(chunks, reply) ? [{ type: 'text', text: chunks.join('') }] : []),
      ...toolCalls.map((call, index) => ({
        type: 'tool_use',
        id: toolUseId(call, context, index),
        name: call.name,
        input: toolInput(call),
      })),
    ],
    stop_reason: STOP_REASONS[finishReason(reply)],
    stop_sequence: null,
    usage: { ...inputUsage(usage), output_tokens: usage.output },
  };
}

function messageStart(context: ReplyContext, usage: FakeUsage): Frame[] {
  const message = {
    id: messageId(context),
    type: 'message',
    role: 'assistant',
    model: context.model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    // The API reports a token or so of output up front; message_delta carries the total.
    usage: { ...inputUsage(usage), output_tokens: Math.min(1, usage.output) },
  };
  return [
    structureFrame(sseEvent('message_start', { type: 'message_start', message })),
    structureFrame(sseEvent('ping', { type: 'ping' })),
  ];
}

function textBlockOpening(chunks: string[]): Frame[] {
  return [
    structureFrame(
      sseEvent('content_block_start', {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'text', text: '' },
      }),
    ),
    ...chunks.map((text) =>
      contentFrame(
        sseEvent('content_block_delta', {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'text_delta', text },
        }),
      ),
    ),
  ];
}

function blockStop(index: number): Frame {
  return structureFrame(sseEvent('content_block_stop', { type: 'content_block_stop', index }));
}

function toolUseFrames(
  call: FakeToolCall,
  index: number,
  context: ReplyContext,
  blockIndex: number,
) {
  return [
    structureFrame(
      sseEvent('content_block_start', {
        type: 'content_block_start',
        index: blockIndex,
        content_block: {
          type: 'tool_use',
          id: toolUseId(call, context, index),
          name: call.name,
          input: {},
        },
      }),
    ),
    ...argumentPieces(argumentsText(call)).map((partial_json) =>
      contentFrame(
        sseEvent('content_block_delta', {
          type: 'content_block_delta',
          index: blockIndex,
          delta: { type: 'input_json_delta', partial_json },
        }),
      ),
    ),
    blockStop(blockIndex),
  ];
}

function replyFrames(reply: FakeReply, context: ReplyContext): Frame[] {
  const chunks = replyChunks(reply);
  const usage = usageOf(reply);
  const frames = messageStart(context, usage);
  const textBlock = hasTextBlock(chunks, reply);
  if (textBlock) frames.push(...textBlockOpening(chunks), blockStop(0));
  (reply.toolCalls ?? []).forEach((call, index) => {
    frames.push(...toolUseFrames(call, index, context, index + (textBlock ? 1 : 0)));
  });
  frames.push(
    structureFrame(
      sseEvent('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: STOP_REASONS[finishReason(reply)], stop_sequence: null },
        usage: { output_tokens: usage.output },
      }),
    ),
    structureFrame(sseEvent('message_stop', { type: 'message_stop' })),
  );
  return frames;
}

function partialFrames(chunks: string[], context: ReplyContext, usage?: FakeUsage): Frame[] {
  return [...messageStart(context, usage ?? DEFAULT_USAGE), ...textBlockOpening(chunks)];
}

function errorBody(type: FakeErrorType, message?: string) {
  return { type: 'error', error: { ...ERRORS[type], ...(message !== undefined && { message }) } };
}

export const anthropicWire: VendorWire = {
  requestIdHeader: 'request-id',
  replyBody,
  replyFrames,
  partialFrames,
  streamErrorFrame: (type) => sseEvent('error', errorBody(type)),
  streamErrorStatus: (type) => (type === 'overloaded' ? 529 : 500),
  errorBody,
  refusal: anthropicRefusal,
};
