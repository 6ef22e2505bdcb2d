import { describe, expect, it } from 'vitest';
import { estimateMessageTokens } from '../../src/llm/estimate-tokens.js';
import {
  extendReach,
  type HistoryMessage,
  historyIsComplete as isComplete,
  trimHistory,
} from '../../src/sessions/history.js';

/**
 * With the scripted estimate (3.5 characters a token, 4 tokens of framing
 * a message), a 35-character message is 14 tokens and a pair 28.
 */
const text = (label: string) => label.padEnd(35, '.');
const PAIR_TOKENS = 28;

/** Pairs q1/a1, q2/a2, ... in order. */
function pairs(count: number): HistoryMessage[] {
  return Array.from({ length: count }, (_, index) => [
    { role: 'user' as const, content: text(`q${index + 1}`) },
    { role: 'assistant' as const, content: text(`a${index + 1}`) },
  ]).flat();
}

const labels = (messages: { content: string }[]) =>
  messages.map((message) => message.content.replace(/\.+$/, ''));

const options = (budgetTokens: number, floorTurns = 0) =>
  ({ budgetTokens, floorTurns, kind: 'scripted' }) as const;

describe('trimHistory', () => {
  it('a pair is 28 tokens in the scripted estimate (the arithmetic the other tests rely on)', () => {
    expect(estimateMessageTokens({ role: 'user', content: text('q1') }, 'scripted')).toBe(14);
  });

  it('keeps everything, in order, as model messages when it fits', () => {
    const history = trimHistory(pairs(3), options(3 * PAIR_TOKENS));
    expect(history).toEqual([
      { role: 'user', content: text('q1') },
      { role: 'assistant', content: text('a1'), toolCalls: [] },
      { role: 'user', content: text('q2') },
      { role: 'assistant', content: text('a2'), toolCalls: [] },
      { role: 'user', content: text('q3') },
      { role: 'assistant', content: text('a3'), toolCalls: [] },
    ]);
  });

  it('drops the oldest pairs first until the rest fits the budget', () => {
    expect(labels(trimHistory(pairs(5), options(2 * PAIR_TOKENS)))).toEqual([
      'q4',
      'a4',
      'q5',
      'a5',
    ]);
    // One token short of two pairs: only the last fits.
    expect(labels(trimHistory(pairs(5), options(2 * PAIR_TOKENS - 1)))).toEqual(['q5', 'a5']);
  });

  it('cuts between pairs, never inside one: no answer without its question', () => {
    // Room for three messages, but the third would be half a pair.
    expect(labels(trimHistory(pairs(3), options(PAIR_TOKENS + 14)))).toEqual(['q3', 'a3']);
  });

  it('keeps the floor of latest pairs even when they alone exceed the budget', () => {
    expect(labels(trimHistory(pairs(4), options(10, 2)))).toEqual(['q3', 'a3', 'q4', 'a4']);
    expect(labels(trimHistory(pairs(4), options(0, 1)))).toEqual(['q4', 'a4']);
  });

  it('fills the rest of the budget with older pairs beyond the floor', () => {
    expect(labels(trimHistory(pairs(5), options(3 * PAIR_TOKENS, 1)))).toEqual([
      'q3',
      'a3',
      'q4',
      'a4',
      'q5',
      'a5',
    ]);
  });

  it('stops at the first older pair that does not fit, even if an older one would', () => {
    const history: HistoryMessage[] = [
      { role: 'user', content: 'tiny' },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'x'.repeat(3500) },
      { role: 'assistant', content: 'long answer' },
      ...pairs(1),
    ];
    expect(labels(trimHistory(history, options(3 * PAIR_TOKENS)))).toEqual(['q1', 'a1']);
  });

  it('with a budget of 0 and no floor, there is no history', () => {
    expect(trimHistory(pairs(2), options(0))).toEqual([]);
    expect(trimHistory([], options(1000, 2))).toEqual([]);
  });

  it('leaves a pair with a blank message out whole: no question runs into the next one', () => {
    const history: HistoryMessage[] = [
      { role: 'user', content: text('q1') },
      { role: 'assistant', content: '  \n' },
      { role: 'user', content: '' },
      { role: 'assistant', content: text('a2') },
      { role: 'user', content: text('q3') },
      { role: 'assistant', content: text('a3') },
    ];
    expect(labels(trimHistory(history, options(1000)))).toEqual(['q3', 'a3']);
  });

  it('counts with the tokeniser of the provider kind', () => {
    // o200k_base counts "hello " repeated as one token each; the 3.5-character rule counts more.
    const history: HistoryMessage[] = [
      { role: 'user', content: 'hello '.repeat(20) },
      { role: 'assistant', content: 'hello '.repeat(20) },
    ];
    const openai = estimateMessageTokens({ role: 'user', content: 'hello '.repeat(20) }, 'openai');
    const scripted = estimateMessageTokens(
      { role: 'user', content: 'hello '.repeat(20) },
      'scripted',
    );
    expect(openai).toBeLessThan(scripted);
    const budget = 2 * openai;
    expect(
      trimHistory(history, { budgetTokens: budget, floorTurns: 0, kind: 'openai' }),
    ).toHaveLength(2);
    expect(
      trimHistory(history, { budgetTokens: budget, floorTurns: 0, kind: 'anthropic' }),
    ).toHaveLength(0);
  });
});

describe('historyIsComplete', () => {
  const newestFirst = (messages: HistoryMessage[]) => [...messages].reverse();
  /** Reads the messages in two steps, as pages are read, then asks. */
  const historyIsComplete = (
    messages: HistoryMessage[],
    opts: ReturnType<typeof options>,
  ): boolean => {
    const half = Math.floor(messages.length / 2);
    const reach = extendReach(
      extendReach({ pairs: 0, tokens: 0 }, messages.slice(0, half), 'scripted'),
      messages.slice(half),
      'scripted',
    );
    return isComplete(reach, opts);
  };

  it('is true once the messages read hold the floor’s pairs and exceed the budget', () => {
    expect(historyIsComplete(newestFirst(pairs(2)), options(10, 2))).toBe(true);
    expect(historyIsComplete(newestFirst(pairs(4)), options(60, 2))).toBe(true);
    // The tail of an older pair counts towards the budget: that pair would not fit either.
    const [, a1, ...rest] = pairs(2);
    const q2a2AndTheTailOfTheFirstPair = newestFirst([a1 as HistoryMessage, ...rest]);
    expect(historyIsComplete(q2a2AndTheTailOfTheFirstPair, options(PAIR_TOKENS + 1, 1))).toBe(true);
  });

  it('is false while an older pair might still be kept', () => {
    // Over budget, but the floor's second pair is not read yet.
    expect(historyIsComplete(newestFirst(pairs(1)), options(10, 2))).toBe(false);
    // Within budget: older pairs may still fit.
    expect(historyIsComplete(newestFirst(pairs(3)), options(1000, 2))).toBe(false);
    expect(historyIsComplete([], options(0, 0))).toBe(false);
  });

  it('agrees with trimHistory: nothing older than a complete read is ever kept', () => {
    const all = pairs(6);
    for (const budget of [0, 20, PAIR_TOKENS, 2 * PAIR_TOKENS + 5, 4 * PAIR_TOKENS]) {
      for (const floor of [0, 1, 2, 3]) {
        const opts = options(budget, floor);
        const full = labels(trimHistory(all, opts));
        // The shortest tail (newest first) that is complete, read message by message.
        for (let read = 1; read <= all.length; read++) {
          const tail = all.slice(all.length - read);
          if (!historyIsComplete(newestFirst(tail), opts)) continue;
          const firstQuestion = tail.findIndex((message) => message.role === 'user');
          const whole = firstQuestion < 0 ? [] : tail.slice(firstQuestion);
          expect(labels(trimHistory(whole, opts))).toEqual(full);
          break;
        }
      }
    }
  });
});
