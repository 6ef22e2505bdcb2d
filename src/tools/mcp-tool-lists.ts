import { createHash } from 'node:crypto';
import { setNewest } from '../bounded-map.js';
import { stableJson } from '../stable-json.js';
import type { McpServerRow, McpToolSnapshot } from '../store/schema.js';

/**
 * The tools each MCP server listed for a run on this replica, kept for
 * `ttlMs` (MCP_TOOLS_CACHE_MS) so the next runs offer them without
 * connecting first: a run then connects to a server only when the model
 * calls one of them (mcp-tools.ts). A remote server costs an
 * initialize and a `tools/list` round trip before a run's first model
 * call otherwise; the price is that a tool added to or removed from the
 * server is seen up to `ttlMs` late. Keyed by the server's id (ids are
 * not reused), and a list is only fresh for the URL and headers it was
 * listed with: a server whose URL or headers were changed (PATCH
 * /v1/mcp-servers/:id, on any replica) is another server, or another
 * account on it, and is listed again by the next run.
 */
export interface McpToolLists {
  /** The server's tools as listed less than `ttlMs` ago, from its URL and headers now; undefined otherwise. */
  fresh(server: ListedServer): McpToolSnapshot[] | undefined;
  remember(server: ListedServer, tools: McpToolSnapshot[]): void;
}

/** What a server's list depends on. */
export type ListedServer = Pick<McpServerRow, 'id' | 'url' | 'headers'>;

export function createMcpToolLists(options: {
  ttlMs: number;
  /** Servers remembered at most; the one listed longest ago is dropped first. */
  limit?: number;
  now?: () => number;
}): McpToolLists {
  const limit = options.limit ?? 1_000;
  const now = options.now ?? Date.now;
  const lists = new Map<
    string,
    { tools: McpToolSnapshot[]; listedAt: number; listedFrom: string }
  >();
  return {
    fresh(server) {
      const entry = lists.get(server.id);
      if (entry === undefined) return undefined;
      if (now() - entry.listedAt < options.ttlMs && entry.listedFrom === listedFrom(server)) {
        return entry.tools;
      }
      lists.delete(server.id);
      return undefined;
    },
    remember(server, tools) {
      const entry = { tools, listedAt: now(), listedFrom: listedFrom(server) };
      setNewest(lists, server.id, entry, limit);
    },
  };
}

/** The URL and headers as a digest: the header values are secrets, kept nowhere else than the row. */
function listedFrom(server: ListedServer): string {
  return createHash('sha256')
    .update(stableJson([server.url, server.headers]))
    .digest('base64url');
}
