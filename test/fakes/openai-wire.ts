import type { FakeErrorType, FakeReply, FakeToolCall, FakeUsage } from './provider-types.js';
import {
  argumentPieces,
  argumentsText,
  contentFrame,
  type Frame,
  finishReason,
  type ReplyContext,
  replyChunks,
  sseData,
  structureFrame,
  usageOf,
  type VendorWire,
} from './wire.js';

/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`): `chat.completion`
 * bodies, `chat.completion.chunk` SSE frames ending in `data: [DONE]`, and
 * `{error:{message,type,param,code}}` errors.
 */

interface OpenAiErrorObject {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

// Wording and codes as the real API sends them, so adapters that match on `code` are tested honestly.
const ERRORS: Record<FakeErrorType, OpenAiErrorObject> = {
  rate_limit: {
    message:
      'Rate limit reached for fake-model in organization org-fake on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.',
    type: 'tokens',
    param: null,
    code: 'rate_limit_exceeded',
  },
  overloaded: {
    message: 'The engine is currently overloaded, please try again later.',
    type: 'server_error',
    param: null,
    code: null,
  },
  server: {
    message: 'The server had an error while processing your request. Sorry about that!',
    type: 'server_error',
    param: null,
    code: null,
  },
  context_length: {
    message:
      "This model's maximum context length is 128000 tokens. However, your messages resulted in 210000 tokens. Please reduce the length of the messages.",
    type: 'invalid_request_error',
    param: 'messages',
    code: 'context_length_exceeded',
  },
  invalid_request: {
    message: 'Invalid request (fake provider).',
    type: 'invalid_request_error',
    param: null,
    code: null,
  },
  authentication: {
    message:
      'Incorrect API key provided: sk-fake. You can find your API key at https://platform.openai.com/account/api-keys.',
    type: 'invalid_request_error',
    param: null,
    code: 'invalid_api_key',
  },
};

function completionId(context: ReplyContext): string {
  return `chatcmpl-fake${context.seq}`;
}

function toolCallId(call: FakeToolCall, context: ReplyContext, index: number): string {
  return call.id ?? `call_fake${context.seq}_${index}`;
}

function usageBody(usage: FakeUsage) {
  return {
    prompt_tokens: usage.input,
    completion_tokens: usage.output,
    total_tokens: usage.input + usage.output,
    prompt_tokens_details: { cached_tokens: usage.cacheRead ?? 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function replyBody(reply: FakeReply, context: ReplyContext) {
  const text = replyChunks(reply).join('');
  const toolCalls = reply.toolCalls ?? [];
  return {
    id: completionId(context),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: context.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          // The API sends null, not '', when the model only called tools.
          content: text === '' && toolCalls.length > 0 ? null : text,
          refusal: null,
          ...(toolCalls.length > 0 && {
            tool_calls: toolCalls.map((call, index) => ({
              id: toolCallId(call, context, index),
              type: 'function',
              function: { name: call.name, arguments: argumentsText(call) },
            })),
          }),
        },
        logprobs: null,
        finish_reason: finishReason(reply),
      },
    ],
    usage: usageBody(usageOf(reply)),
  };
}

/** Builds `chat.completion.chunk` frames sharing one id and timestamp. */
function chunkWriter(context: ReplyContext) {
  const id = completionId(context);
  const created = Math.floor(Date.now() / 1000);
  const base = { id, object: 'chat.completion.chunk', created, model: context.model };
  // With include_usage every chunk carries `usage: null` until the final usage-only chunk.
  const usageField = context.includeUsage ? { usage: null } : {};
  return {
    delta(delta: Record<string, unknown>, finish: string | null = null): string {
      return sseData({
        ...base,
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
        ...usageField,
      });
    },
    usage(usage: FakeUsage): string {
      return sseData({ ...base, choices: [], usage: usageBody(usage) });
    },
  };
}

function openingFrames(chunks: string[], context: ReplyContext): Frame[] {
  const write = chunkWriter(context);
  return [
    structureFrame(write.delta({ role: 'assistant', content: '', refusal: null })),
    ...chunks.map((chunk) => contentFrame(write.delta({ content: chunk }))),
  ];
}

function replyFrames(reply: FakeReply, context: ReplyContext): Frame[] {
  const write = chunkWriter(context);
  const frames = openingFrames(replyChunks(reply), context);
  (reply.toolCalls ?? []).forEach((call, index) => {
    const id = toolCallId(call, context, index);
    frames.push(
      structureFrame(
        write.delta({
          tool_calls: [
            { index, id, type: 'function', function: { name: call.name, arguments: '' } },
          ],
        }),
      ),
    );
    for (const piece of argumentPieces(argumentsText(call))) {
      frames.push(
        contentFrame(write.delta({ tool_calls: [{ index, function: { arguments: piece } }] })),
      );
    }
  });
  frames.push(structureFrame(write.delta({}, finishReason(reply))));
  if (context.includeUsage) frames.push(structureFrame(write.usage(usageOf(reply))));
  frames.push(structureFrame('data: [DONE]\n\n'));
  return frames;
}

function errorBody(type: FakeErrorType, message?: string) {
  return { error: { ...ERRORS[type], ...(message !== undefined && { message }) } };
}

export const openaiWire: VendorWire = {
  requestIdHeader: 'x-request-id',
  replyBody,
  replyFrames,
  partialFrames: openingFrames,
  streamErrorFrame: (type) => sseData(errorBody(type)),
  streamErrorStatus: (type) => (type === 'overloaded' ? 503 : 500),
  errorBody,
  // The fake checks no OpenAI request constraints yet.
  refusal: () => undefined,
};
