import { describe, expect, it } from 'vitest';
import { tokenCount } from '../../../src/llm/types.js';

describe('tokenCount', () => {
  it('reads what providers have sent as a whole number from 0 to a PostgreSQL integer', () => {
    expect(tokenCount(812)).toBe(812);
    expect(tokenCount(10.5)).toBe(11);
    expect(tokenCount('10')).toBe(10);
    expect(tokenCount(1e12)).toBe(2_147_483_647);
    for (const nonsense of [
      -5,
      null,
      undefined,
      '',
      'ten',
      Number.NaN,
      Number.POSITIVE_INFINITY,
      {},
    ]) {
      expect(tokenCount(nonsense), String(nonsense)).toBe(0);
    }
  });
});
