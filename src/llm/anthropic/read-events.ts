import type Anthropic from '@anthropic-ai/sdk';
import { LlmError } from '../errors.js';
import type { ArgumentBudget } from '../output-bound.js';
import { toToolCallPart } from '../tool-arguments.js';
import { type StreamPart, type ToolDefinition, tokenCount, type Usage } from '../types.js';
import type { ErrorContext } from './map-error.js';
import { mapFinishReason } from './map-finish-reason.js';

interface OpenToolCall {
  id: string;
  name: string;
  rawArguments: string;
}

export interface EventReader {
  /** The part this event completes, if any: no event completes more than one. */
  read(event: Anthropic.RawMessageStreamEvent): StreamPart | undefined;
  /** After the last event: usage and finish, or `stream_interrupted` before `message_stop`. */
  end(context: ErrorContext): StreamPart[];
  /** The usage the events read so far reported. */
  usage(): Usage;
}

/**
 * The state of one turn's raw events: text deltas come out as they arrive,
 * each `tool_use` block once it is complete, usage and finish at the end.
 * A reader called from the adapter's loop rather than a generator of its
 * own, so a part crosses one async generator fewer on its way out.
 * `argumentBudget` bounds the `tool_use` input it holds while a block is
 * open: `read` throws past it.
 */
export function createEventReader(
  tools: ToolDefinition[] | undefined,
  argumentBudget: ArgumentBudget,
): EventReader {
  const toolCalls = new Map<number, OpenToolCall>();
  const counts: EventUsage = {
    input_tokens: 0,
    output_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation_input_tokens: 0,
  };
  let stopReason: string | null = null;
  let stopped = false;
  return {
    read(event) {
      switch (event.type) {
        case 'message_start':
          addUsage(counts, event.message.usage);
          return undefined;
        case 'content_block_start':
          if (event.content_block.type === 'tool_use') {
            const { id, name } = event.content_block;
            toolCalls.set(event.index, { id, name, rawArguments: '' });
          }
          return undefined;
        case 'content_block_delta':
          // Typed as a string, but the wire is JSON: anything else would become "[object Object]".
          if (
            event.delta.type === 'text_delta' &&
            typeof event.delta.text === 'string' &&
            event.delta.text !== ''
          )
            return { type: 'text-delta', text: event.delta.text };
          if (event.delta.type === 'input_json_delta') {
            const call = toolCalls.get(event.index);
            if (call) {
              argumentBudget.add(event.delta.partial_json);
              call.rawArguments += event.delta.partial_json;
            }
          }
          return undefined;
        case 'content_block_stop': {
          const call = toolCalls.get(event.index);
          if (!call) return undefined;
          toolCalls.delete(event.index);
          return toToolCallPart(call, tools);
        }
        case 'message_delta':
          stopReason = event.delta.stop_reason ?? stopReason;
          addUsage(counts, event.usage);
          return undefined;
        case 'message_stop':
          stopped = true;
          return undefined;
      }
    },
    end(context) {
      // A tool_use block never stopped is a call half-sent: dropping it would end the turn
      // as if the model had answered, with nothing.
      const unfinished = !stopped
        ? 'the event stream ended before message_stop'
        : toolCalls.size > 0
          ? 'a tool_use block never ended (no content_block_stop)'
          : undefined;
      if (unfinished)
        throw new LlmError({
          kind: 'stream_interrupted',
          provider: context.provider,
          model: context.model,
          detail: unfinished,
        });
      return [
        { type: 'usage', usage: toUsage(counts) },
        { type: 'finish', reason: mapFinishReason(stopReason), providerReason: stopReason },
      ];
    },
    usage: () => toUsage(counts),
  };
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
  const cachedInputTokens = tokenCount(counts.cache_read_input_tokens);
  const cacheWriteTokens = tokenCount(counts.cache_creation_input_tokens);
  return {
    inputTokens: tokenCount(tokenCount(counts.input_tokens) + cachedInputTokens + cacheWriteTokens),
    outputTokens: tokenCount(counts.output_tokens),
    cachedInputTokens,
    cacheWriteTokens,
  };
}
