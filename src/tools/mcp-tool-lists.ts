import { setNewest } from '../bounded-map.js';
import type { McpToolSnapshot } from '../store/schema.js';

/**
 * The tools each MCP server listed for a run on this replica, kept for
 * `ttlMs` (MCP_TOOLS_CACHE_MS) so the next runs offer them without
 * connecting first: a run then connects to a server only when the model
 * calls one of its tools (mcp-tools.ts). A remote server costs an
 * initialize and a `tools/list` round trip before a run's first model
 * call otherwise; the price is that a tool added to or removed from the
 * server is seen up to `ttlMs` late. Keyed by the server's id: a server
 * is never changed, only registered or deleted, and ids are not reused.
 */
export interface McpToolLists {
  /** The server's tools as listed less than `ttlMs` ago; undefined otherwise. */
  fresh(serverId: string): McpToolSnapshot[] | undefined;
  remember(serverId: string, tools: McpToolSnapshot[]): void;
}

export function createMcpToolLists(options: {
  ttlMs: number;
  /** Servers remembered at most; the one listed longest ago is dropped first. */
  limit?: number;
  now?: () => number;
}): McpToolLists {
  const limit = options.limit ?? 1_000;
  const now = options.now ?? Date.now;
  const lists = new Map<string, { tools: McpToolSnapshot[]; listedAt: number }>();
  return {
    fresh(serverId) {
      const entry = lists.get(serverId);
      if (entry === undefined) return undefined;
      if (now() - entry.listedAt < options.ttlMs) return entry.tools;
      lists.delete(serverId);
      return undefined;
    },
    remember(serverId, tools) {
      setNewest(lists, serverId, { tools, listedAt: now() }, limit);
    },
  };
}
