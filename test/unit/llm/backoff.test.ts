import { describe, expect, it } from 'vitest';
import { abortableSleep, retryDelayMs } from '../../../src/llm/router/backoff.js';

describe('retryDelayMs', () => {
  it('grows exponentially under full jitter and stops at the ceiling', () => {
    const top = () => 0.999_999;
    expect(retryDelayMs({ retry: 0, baseMs: 100, maxMs: 1000, random: top })).toBe(99);
    expect(retryDelayMs({ retry: 2, baseMs: 100, maxMs: 1000, random: top })).toBe(399);
    expect(retryDelayMs({ retry: 10, baseMs: 100, maxMs: 1000, random: top })).toBe(999);
    expect(retryDelayMs({ retry: 3, baseMs: 100, maxMs: 1000, random: () => 0 })).toBe(0);
  });

  it('spreads delays over the whole range (full jitter)', () => {
    let seed = 1;
    const random = () => {
      seed = (seed * 16807) % 2147483647;
      return seed / 2147483647;
    };
    const delays = Array.from({ length: 500 }, () =>
      retryDelayMs({ retry: 3, baseMs: 100, maxMs: 10_000, random }),
    );
    expect(Math.min(...delays)).toBeLessThan(100);
    expect(Math.max(...delays)).toBeGreaterThan(700);
    expect(Math.max(...delays)).toBeLessThan(800);
  });

  it('waits at least as long as the provider asked', () => {
    expect(
      retryDelayMs({ retry: 0, baseMs: 100, maxMs: 1000, retryAfterMs: 2500, random: () => 0.5 }),
    ).toBe(2500);
  });
});

describe('abortableSleep', () => {
  it('rejects with the signal’s reason when aborted', async () => {
    const controller = new AbortController();
    const sleeping = abortableSleep(60_000, controller.signal);
    controller.abort(new Error('cancelled by user'));
    await expect(sleeping).rejects.toThrow('cancelled by user');
  });

  it('rejects at once on an aborted signal and resolves otherwise', async () => {
    await expect(abortableSleep(10, AbortSignal.abort(new Error('already')))).rejects.toThrow(
      'already',
    );
    await expect(abortableSleep(1, new AbortController().signal)).resolves.toBeUndefined();
  });
});
