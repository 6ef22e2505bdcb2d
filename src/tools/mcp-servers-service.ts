import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { badRequest, conflict, notFound } from '../errors.js';
import type { Db } from '../store/database.js';
import type { McpServerRow, McpToolSnapshot } from '../store/schema.js';
import {
  type EndpointChanges,
  insertEndpoint,
  tenantEndpointsRepository,
} from '../store/tenant-endpoints.js';
import type { HttpToolPolicy } from './http-tool.js';
import { checkDestination } from './http-tools-service.js';
import type { JsonSchemaObject } from './json-schema-parameters.js';
import type { McpToolLists } from './mcp-tool-lists.js';
import {
  connectMcpServer,
  connectMcpTools,
  type McpToolset,
  McpUnreachable,
  mcpToolName,
  mcpToolProblem,
} from './mcp-tools.js';
import type { Tool } from './types.js';

/**
 * MCP servers of a tenant: registration and changes (the URL checked
 * like an HTTP tool's, then one connection to list the tools), listing
 * without secrets, and the connected `Tool`s of one workflow run.
 *
 * The listing shows the tools as listed at registration (or at the last
 * change of the URL or headers), stored with the server: listing the
 * servers must not depend on every server being up, nor cost a connection
 * to each. Workflows list the tools live, so a server that changed its
 * tools since is seen as it is now (with MCP_TOOLS_CACHE_MS, as a run on
 * this replica listed them within that time).
 */

export interface NewMcpServer {
  name: string;
  url: string;
  /** Header values are secrets: stored, sent with each request, never shown again. */
  headers: Record<string, string>;
  timeoutMs: number;
  /** Every call of any of its tools waits for the user's approval. */
  requiresApproval: boolean;
}

/**
 * A change of an MCP server: the fields given, each checked as at
 * registration; `headers` replaces them all. Not its name, the prefix of
 * its tools' names, which workflows name them by.
 */
export type McpServerChanges = Partial<Omit<NewMcpServer, 'name'>>;

export interface McpServerToolInfo {
  /** The server's own name for the tool. */
  name: string;
  /** What the model calls it, or null when it cannot be offered (see `problem`). */
  toolName: string | null;
  description: string | null;
  inputSchema: JsonSchemaObject;
  problem: string | null;
}

/** An MCP server as the API shows it: header names only. */
export interface McpServerInfo {
  id: string;
  name: string;
  url: string;
  headerNames: string[];
  timeoutMs: number;
  requiresApproval: boolean;
  /** As listed at registration, or at the last change of its URL or headers. */
  tools: McpServerToolInfo[];
  createdAt: Date;
}

export function createMcpServersService(options: {
  db: Db;
  policy: HttpToolPolicy;
  log: Logger;
  /** MCP_SERVERS_MAX_PER_TENANT: every workflow offers the model all their tools, and model APIs refuse too many tools. */
  maxPerTenant: number;
  /** Told once one of a tenant's MCP servers was registered, changed or removed (see workflows/early-start.ts). */
  onChanged: (tenantId: string) => void;
  /** Servers' tools as runs on this replica listed them (MCP_TOOLS_CACHE_MS); listed by every run when unset. */
  toolLists?: McpToolLists;
}) {
  const { db, policy, log } = options;
  async function get(tenantId: string, id: string): Promise<McpServerInfo> {
    const row = await tenantEndpointsRepository(db, 'mcp_servers').findById(tenantId, id);
    if (!row) throw notFound('MCP server');
    return toInfo(row);
  }
  return {
    async create(tenantId: string, input: NewMcpServer): Promise<McpServerInfo> {
      const url = checkDestination(input.url, policy).href;
      const server = { name: input.name, url, headers: input.headers, timeout_ms: input.timeoutMs };
      // A tenant at its cap is refused before its server is connected to and
      // listed, which can take seconds; the insert checks again, under a lock.
      const registered = await tenantEndpointsRepository(db, 'mcp_servers').countByTenant(tenantId);
      if (registered >= options.maxPerTenant) throw limitReached(options.maxPerTenant);
      const tools = await listToolsOf(server, { policy, log, field: 'body.url' });
      const result = await insertEndpoint(db, {
        table: 'mcp_servers',
        limit: options.maxPerTenant,
        row: {
          id: randomUUID(),
          tenant_id: tenantId,
          name: server.name,
          url: server.url,
          headers: JSON.stringify(server.headers),
          timeout_ms: input.timeoutMs,
          tools: JSON.stringify(tools),
          requires_approval: input.requiresApproval,
        },
      });
      if ('refused' in result) {
        if (result.refused === 'name_taken') {
          throw conflict(
            'mcp_server_name_taken',
            `The tenant already has an MCP server named "${input.name}"`,
          );
        }
        throw limitReached(result.limit);
      }
      const row = result.inserted;
      // Listed just now: this replica's next runs need not list them again.
      options.toolLists?.remember(row, tools);
      options.onChanged(tenantId);
      return toInfo(row);
    },

    async list(tenantId: string): Promise<McpServerInfo[]> {
      return (await tenantEndpointsRepository(db, 'mcp_servers').listByTenant(tenantId)).map(
        toInfo,
      );
    },

    get,

    /**
     * Sets the fields `changes` gives (none: the server as it is, nothing
     * written). A change naming `url` or `headers` connects with the
     * server's new URL, headers and timeout and lists its tools, as a
     * registration does, and writes URL, headers and tools together, on
     * condition that the row's URL and headers are still those it read: a
     * concurrent change of the other (one changing the URL, one the
     * headers) has it read, connect and list again, so neither is lost and
     * the stored tools are always those the stored URL and headers listed.
     * Runs see the change from their next start or resume (the write bumps
     * the tenant's endpoints_version, migration 0014; a list this or
     * another replica remembers is for the old URL and headers, so not used).
     */
    async update(tenantId: string, id: string, changes: McpServerChanges): Promise<McpServerInfo> {
      const url =
        changes.url === undefined ? undefined : checkDestination(changes.url, policy).href;
      const repository = tenantEndpointsRepository(db, 'mcp_servers');
      const settings: EndpointChanges<'mcp_servers'> = {
        ...(changes.timeoutMs !== undefined && { timeout_ms: changes.timeoutMs }),
        ...(changes.requiresApproval !== undefined && {
          requires_approval: changes.requiresApproval,
        }),
      };
      if (url === undefined && changes.headers === undefined) {
        if (Object.keys(settings).length === 0) return get(tenantId, id);
        const row = await repository.update(tenantId, id, settings);
        if (!row) throw notFound('MCP server');
        options.onChanged(tenantId);
        return toInfo(row);
      }
      for (let attempt = 1; ; attempt++) {
        const current = await repository.findById(tenantId, id);
        if (!current) throw notFound('MCP server');
        const server = {
          name: current.name,
          url: url ?? current.url,
          headers: changes.headers ?? current.headers,
          timeout_ms: changes.timeoutMs ?? current.timeout_ms,
        };
        const field = url === undefined ? 'body.headers' : 'body.url';
        const tools = await listToolsOf(server, { policy, log, field });
        const relisted = {
          url: server.url,
          headers: JSON.stringify(server.headers),
          tools: JSON.stringify(tools),
        };
        const row = await repository.update(tenantId, id, { ...relisted, ...settings }, current);
        if (row) {
          // Listed just now, from what the row now holds: this replica's next runs need not list them again.
          options.toolLists?.remember(row, row.tools);
          options.onChanged(tenantId);
          return toInfo(row);
        }
        if (attempt >= RELIST_ATTEMPTS) {
          throw conflict(
            'concurrent_change',
            'The MCP server’s URL or headers kept changing while this change listed its tools; send it again',
          );
        }
      }
    },

    /**
     * One tool of the tenant's server (`toolName` as the server lists it)
     * over a connection opened now, for a test call; the caller must
     * `close()` it. 404 for no such server; 400 `mcp_unreachable` when it
     * cannot be used, `unknown_tool` when it lists no such tool.
     */
    async toolForTest(
      tenantId: string,
      id: string,
      toolName: string,
    ): Promise<{ tool: Tool; close: () => Promise<void> }> {
      const row = await tenantEndpointsRepository(db, 'mcp_servers').findById(tenantId, id);
      if (!row) throw notFound('MCP server');
      const toolset = await connectMcpTools([row], { policy, log: log.child({ tenantId }) });
      const reason = toolset.unavailable[0]?.reason;
      const tool = toolset.tools.find((each) => each.name === mcpToolName(row.name, toolName));
      if (tool) return { tool, close: toolset.close };
      await toolset.close();
      if (reason !== undefined) {
        throw badRequest('mcp_unreachable', `The MCP server could not be used: ${reason}`);
      }
      throw badRequest('unknown_tool', `The MCP server lists no usable tool named "${toolName}"`, [
        { field: 'body.tool', message: `not among the server's tools: ${toolName}` },
      ]);
    },

    async delete(tenantId: string, id: string): Promise<void> {
      if (!(await tenantEndpointsRepository(db, 'mcp_servers').delete(tenantId, id)))
        throw notFound('MCP server');
      options.onChanged(tenantId);
    },

    /**
     * The MCP tools of a tenant's `servers` (listTenantEndpoints) for one workflow run, over connections opened
     * now. The caller owns the result and must `close()` it when the run
     * ends. A server that cannot be reached is left out (see `unavailable`)
     * rather than failing the workflow.
     */
    toolsOf(tenantId: string, servers: McpServerRow[]): Promise<McpToolset> {
      // Most tenants have none: no child logger made, nothing to settle.
      if (servers.length === 0) {
        return Promise.resolve({ tools: [], unavailable: [], close: async () => undefined });
      }
      return connectMcpTools(servers, {
        policy,
        log: log.child({ tenantId }),
        lists: options.toolLists,
      });
    },
  };
}

export type McpServersService = ReturnType<typeof createMcpServersService>;

/** Reads, connections and conditional writes of one change racing others (update) before it gives up with 409. */
const RELIST_ATTEMPTS = 3;

/**
 * Connects to a server being registered or changed and lists its tools;
 * one that cannot be used is a 400 `mcp_unreachable` with the reason,
 * naming `field`.
 */
async function listToolsOf(
  server: Pick<McpServerRow, 'name' | 'url' | 'headers' | 'timeout_ms'>,
  options: { policy: HttpToolPolicy; log: Logger; field: string },
): Promise<McpToolSnapshot[]> {
  try {
    const connection = await connectMcpServer(server, { policy: options.policy, log: options.log });
    await connection.close();
    return connection.tools;
  } catch (error) {
    if (!(error instanceof McpUnreachable)) throw error;
    throw badRequest('mcp_unreachable', `The MCP server could not be used: ${error.message}`, [
      { field: options.field, message: error.message },
    ]);
  }
}

function toInfo(row: McpServerRow): McpServerInfo {
  return {
    id: row.id,
    name: row.name,
    url: row.url,
    headerNames: Object.keys(row.headers).sort(),
    timeoutMs: row.timeout_ms,
    requiresApproval: row.requires_approval,
    tools: row.tools.map((tool) => {
      const problem = mcpToolProblem(row.name, tool) ?? null;
      return {
        name: tool.name,
        toolName: problem === null ? mcpToolName(row.name, tool.name) : null,
        description: tool.description ?? null,
        inputSchema: tool.inputSchema,
        problem,
      };
    }),
    createdAt: row.created_at,
  };
}

/** The 409 of a create past the tenant's cap on MCP servers. */
function limitReached(limit: number) {
  return conflict(
    'mcp_server_limit_reached',
    `The tenant has ${limit} MCP servers, the most it may have (MCP_SERVERS_MAX_PER_TENANT); delete one first`,
    { limit },
  );
}
