import { describe, expect, it } from 'vitest';
import { createMcpToolLists } from '../../../src/tools/mcp-tool-lists.js';

const tools = (name: string) => [{ name, inputSchema: { type: 'object' as const } }];
const server = (id: string, changes: { url?: string; headers?: Record<string, string> } = {}) => ({
  id,
  url: `https://${id}.example.com/mcp`,
  headers: { Authorization: 'Bearer one' },
  ...changes,
});

describe('MCP tool lists remembered by a replica', () => {
  it('are fresh for ttlMs after they were listed, then forgotten', () => {
    let now = 1_000;
    const lists = createMcpToolLists({ ttlMs: 500, now: () => now });
    expect(lists.fresh(server('a'))).toBeUndefined();
    lists.remember(server('a'), tools('add'));
    now += 499;
    expect(lists.fresh(server('a'))).toEqual(tools('add'));
    now += 1;
    expect(lists.fresh(server('a'))).toBeUndefined();
    // Listed again: fresh again, from then.
    lists.remember(server('a'), tools('sub'));
    expect(lists.fresh(server('a'))).toEqual(tools('sub'));
  });

  it('keep at most `limit` servers, dropping the one listed longest ago', () => {
    let now = 0;
    const lists = createMcpToolLists({ ttlMs: 10_000, limit: 2, now: () => now });
    lists.remember(server('a'), tools('a'));
    now += 1;
    lists.remember(server('b'), tools('b'));
    now += 1;
    lists.remember(server('a'), tools('a2'));
    lists.remember(server('c'), tools('c'));
    expect(lists.fresh(server('b'))).toBeUndefined();
    expect(lists.fresh(server('a'))).toEqual(tools('a2'));
    expect(lists.fresh(server('c'))).toEqual(tools('c'));
  });

  it('are not fresh for a server whose URL or headers changed since, whatever the key order of its headers', () => {
    const lists = createMcpToolLists({ ttlMs: 10_000, now: () => 0 });
    const headers = { Authorization: 'Bearer one', 'X-Team': 'core' };
    lists.remember(server('a', { headers }), tools('add'));
    expect(
      lists.fresh(server('a', { headers: { 'X-Team': 'core', Authorization: 'Bearer one' } })),
    ).toEqual(tools('add'));
    expect(
      lists.fresh(server('a', { headers: { ...headers, Authorization: 'Bearer two' } })),
    ).toBeUndefined();

    lists.remember(server('b'), tools('add'));
    expect(lists.fresh(server('b', { url: 'https://b.example.com/v2' }))).toBeUndefined();
    // Forgotten: the old URL's list is not fresh again either.
    expect(lists.fresh(server('b'))).toBeUndefined();
  });
});
