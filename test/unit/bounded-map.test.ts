import { describe, expect, it } from 'vitest';
import { setNewest } from '../../src/bounded-map.js';

describe('setNewest', () => {
  it('keeps at most `limit` entries, dropping the one set longest ago; setting a key again makes it the newest', () => {
    const map = new Map<string, number>();
    setNewest(map, 'a', 1, 2);
    setNewest(map, 'b', 2, 2);
    setNewest(map, 'a', 3, 2);
    setNewest(map, 'c', 4, 2);
    expect([...map]).toEqual([
      ['a', 3],
      ['c', 4],
    ]);
  });
});
