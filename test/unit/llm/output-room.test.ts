import { describe, expect, it } from 'vitest';
import {
  type InputEstimate,
  MIN_OUTPUT_TOKENS,
  outputRoom,
  UNSEEN_INPUT_TOKENS,
} from '../../../src/llm/output-room.js';
import type { ModelRequest } from '../../../src/llm/types.js';

/** A 20,000-token window, output up to 8,000 tokens; Anthropic-kind estimates (3.5 characters a token). */
const limits = { contextWindow: 20_000, maxOutputTokens: 8_000 };
const kind = 'anthropic' as const;

/** A user message of `tokens` tokens (and 4 of framing). */
const asking = (tokens: number, maxOutputTokens?: number): ModelRequest => ({
  messages: [{ role: 'user', content: 'x'.repeat(Math.round(tokens * 3.5)) }],
  ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
});

const roomOf = (request: ModelRequest, input?: InputEstimate) =>
  outputRoom({ request, limits, kind, ...(input ? { input } : {}) });

describe('the output a request asks of a model', () => {
  it('is the model’s whole output when the input leaves room for it', () => {
    expect(roomOf(asking(10_000))).toMatchObject({ maxOutputTokens: 8_000, fits: true });
  });

  it('is capped to the room the input leaves, past what the request text shows', () => {
    // 14,000 tokens of text and 4 of framing: the rest of the window, less what providers add unseen.
    expect(roomOf(asking(14_000))).toMatchObject({
      maxOutputTokens: 20_000 - 14_004 - UNSEEN_INPUT_TOKENS,
      fits: true,
    });
  });

  it('never below the floor, so a turn is refused for its length rather than cut off: it does not fit', () => {
    expect(roomOf(asking(19_500))).toMatchObject({
      maxOutputTokens: MIN_OUTPUT_TOKENS,
      fits: false,
    });
    // A request asking for less than the floor keeps asking for that, and fits when the room holds it.
    expect(roomOf(asking(19_000, 10))).toMatchObject({ maxOutputTokens: 10, fits: true });
    expect(roomOf(asking(19_500, 10))).toMatchObject({ maxOutputTokens: 10, fits: false });
    // An input past the window does not fit either.
    expect(roomOf(asking(25_000)).fits).toBe(false);
  });

  it('what the request asked for, when less than the model allows, is capped only when that does not fit', () => {
    expect(roomOf(asking(14_000, 2_000)).maxOutputTokens).toBe(2_000);
    expect(roomOf(asking(14_000, 9_000)).maxOutputTokens).toBe(
      20_000 - 14_004 - UNSEEN_INPUT_TOKENS,
    );
  });

  it('comes from the caller’s estimate of the same kind without counting the request again', () => {
    // The text says 100 tokens; the caller's estimate, 17,000: it is the one used, and handed on.
    const input: InputEstimate = { kind, tokens: 17_000, exact: true };
    const room = roomOf(asking(100), input);
    expect(room).toMatchObject({ maxOutputTokens: 20_000 - 17_000 - UNSEEN_INPUT_TOKENS });
    expect(room.input).toBe(input);
  });

  it('counts the request in its own model’s tokens when the caller’s estimate is of another kind', () => {
    const openai: InputEstimate = { kind: 'openai', tokens: 17_000, exact: true };
    const room = roomOf(asking(100), openai);
    expect(room).toMatchObject({ maxOutputTokens: 8_000, input: { kind, tokens: 104 } });
  });

  it('counts exactly when the caller’s upper bound leaves too little room', () => {
    // A bound of 17,000 above 100 tokens of text: the exact count finds the room.
    const bound: InputEstimate = { kind: 'openai', tokens: 17_000, exact: false };
    const request: ModelRequest = { messages: [{ role: 'user', content: ' data'.repeat(100) }] };
    const room = outputRoom({ request, limits, kind: 'openai', input: bound });
    expect(room).toMatchObject({ maxOutputTokens: 8_000, fits: true, input: { exact: true } });
    expect(room.input.tokens).toBeLessThan(200);
  });
});
