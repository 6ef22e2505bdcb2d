import { describe, expect, it } from 'vitest';
import { mapFinishReason } from '../../../../src/llm/openai/map-finish-reason.js';

describe('mapFinishReason', () => {
  it.each([
    ['stop', 'stop'],
    ['length', 'length'],
    ['tool_calls', 'tool_calls'],
    ['function_call', 'tool_calls'],
    ['content_filter', 'content_filter'],
    ['eos_token', 'other'],
    ['', 'other'],
    [null, 'other'],
    [undefined, 'other'],
  ])('maps %j to %s', (reason, expected) => {
    expect(mapFinishReason(reason)).toBe(expected);
  });
});
