import { describe, expect, it } from 'vitest';
import { createMcpToolLists } from '../../../src/tools/mcp-tool-lists.js';

const tools = (name: string) => [{ name, inputSchema: { type: 'object' as const } }];

describe('MCP tool lists remembered by a replica', () => {
  it('are fresh for ttlMs after they were listed, then forgotten', () => {
    let now = 1_000;
    const lists = createMcpToolLists({ ttlMs: 500, now: () => now });
    expect(lists.fresh('a')).toBeUndefined();
    lists.remember('a', tools('add'));
    now += 499;
    expect(lists.fresh('a')).toEqual(tools('add'));
    now += 1;
    expect(lists.fresh('a')).toBeUndefined();
    // Listed again: fresh again, from then.
    lists.remember('a', tools('sub'));
    expect(lists.fresh('a')).toEqual(tools('sub'));
  });

  it('keep at most `limit` servers, dropping the one listed longest ago', () => {
    let now = 0;
    const lists = createMcpToolLists({ ttlMs: 10_000, limit: 2, now: () => now });
    lists.remember('a', tools('a'));
    now += 1;
    lists.remember('b', tools('b'));
    now += 1;
    lists.remember('a', tools('a2'));
    lists.remember('c', tools('c'));
    expect(lists.fresh('b')).toBeUndefined();
    expect(lists.fresh('a')).toEqual(tools('a2'));
    expect(lists.fresh('c')).toEqual(tools('c'));
  });
});
