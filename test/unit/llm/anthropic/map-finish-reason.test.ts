import { describe, expect, it } from 'vitest';
import { mapFinishReason } from '../../../../src/llm/anthropic/map-finish-reason.js';

describe('mapFinishReason', () => {
  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
    ['pause_turn', 'other'],
    ['something_new', 'other'],
    [null, 'other'],
  ] as const)('%s -> %s', (reason, expected) => {
    expect(mapFinishReason(reason)).toBe(expected);
  });
});
