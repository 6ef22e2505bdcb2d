import type Anthropic from '@anthropic-ai/sdk';
import type { FinishReason } from '../types.js';

/** Anthropic's `stop_reason` in our words; the raw value travels on as `providerReason`. */
export function mapFinishReason(reason: Anthropic.StopReason | string | null): FinishReason {
  switch (reason) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop';
    case 'max_tokens':
    // The answer ran into the context window: cut off like `max_tokens`.
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      // `pause_turn` (server tools) and reasons newer than this adapter.
      return 'other';
  }
}
