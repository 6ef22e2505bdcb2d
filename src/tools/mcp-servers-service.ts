import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { badRequest, conflict, notFound } from '../errors.js';
import type { Db } from '../store/database.js';
import type { McpServerRow } from '../store/schema.js';
import { tenantEndpointsRepository } from '../store/tenant-endpoints.js';
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

/**
 * MCP servers of a tenant: registration (the URL checked like an HTTP
 * tool's, then one connection to list the tools), listing without
 * secrets, and the connected `Tool`s of one workflow run.
 *
 * The listing shows the tools as listed at registration, stored with the
 * server: listing the servers must not depend on every server being up,
 * nor cost a connection to each. Workflows list the tools live, so a
 * server that changed its tools since is seen as it is now (with
 * MCP_TOOLS_CACHE_MS, as a run on this replica listed them within that
 * time).
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
  /** As listed at registration. */
  tools: McpServerToolInfo[];
  createdAt: Date;
}

export function createMcpServersService(options: {
  db: Db;
  policy: HttpToolPolicy;
  log: Logger;
  /** Told once one of a tenant's MCP servers was registered or removed (see workflows/early-start.ts). */
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
      const url = checkDestination(input.url, policy);
      const server = { name: input.name, url: url.href, headers: input.headers };
      let tools: McpServerRow['tools'];
      try {
        const connection = await connectMcpServer(
          { ...server, timeout_ms: input.timeoutMs },
          { policy, log },
        );
        tools = connection.tools;
        await connection.close();
      } catch (error) {
        if (!(error instanceof McpUnreachable)) throw error;
        throw badRequest('mcp_unreachable', `The MCP server could not be used: ${error.message}`, [
          { field: 'body.url', message: error.message },
        ]);
      }
      const row = await tenantEndpointsRepository(db, 'mcp_servers').insert({
        id: randomUUID(),
        tenant_id: tenantId,
        name: server.name,
        url: server.url,
        headers: JSON.stringify(server.headers),
        timeout_ms: input.timeoutMs,
        tools: JSON.stringify(tools),
        requires_approval: input.requiresApproval,
      });
      if (!row) {
        throw conflict(
          'mcp_server_name_taken',
          `The tenant already has an MCP server named "${input.name}"`,
        );
      }
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
      return connectMcpTools(servers, {
        policy,
        log: log.child({ tenantId }),
        lists: options.toolLists,
      });
    },
  };
}

export type McpServersService = ReturnType<typeof createMcpServersService>;

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
