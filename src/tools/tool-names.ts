import type { TenantEndpoints } from '../store/tenant-endpoints.js';
import { MCP_TOOL_NAME_SEPARATOR } from './mcp-tools.js';

/**
 * The names among `requested` that no tool of `endpoints` answers to: not
 * one of the tenant's HTTP tools, and not `<server>__<tool>` of one of its
 * MCP servers. An MCP server's tools are known when a run lists them (or
 * reuses a recent listing, MCP_TOOLS_CACHE_MS), so any tool name under a
 * registered server counts here; one the server does not offer is left
 * out by the run, with a warning.
 */
export function namesWithoutTool(
  requested: readonly string[],
  endpoints: TenantEndpoints,
): string[] {
  const httpTools = new Set(endpoints.httpTools.map((tool) => tool.name));
  const serverPrefixes = endpoints.mcpServers.map(
    (server) => `${server.name}${MCP_TOOL_NAME_SEPARATOR}`,
  );
  return requested.filter(
    (name) =>
      !httpTools.has(name) &&
      !serverPrefixes.some((prefix) => name.length > prefix.length && name.startsWith(prefix)),
  );
}

/**
 * Which of the tool names a new workflow asks for its tenant has no tool
 * of: the built-ins the configuration enables need no read; other names
 * are looked up in the tenant's tools as this replica remembers them, and
 * read afresh when some are not there (another replica may have
 * registered them). A name whose tool is removed before the run starts is
 * reported by the run (a `warning`).
 */
export function createToolNameCheck(options: {
  builtins: readonly string[];
  remembered: (tenantId: string) => TenantEndpoints | undefined;
  read: (tenantId: string) => Promise<TenantEndpoints>;
}): (tenantId: string, requested: readonly string[]) => Promise<string[]> {
  const builtins = new Set(options.builtins);
  return async (tenantId, requested) => {
    const others = requested.filter((name) => !builtins.has(name));
    if (others.length === 0) return [];
    const remembered = options.remembered(tenantId);
    if (remembered && namesWithoutTool(others, remembered).length === 0) return [];
    return namesWithoutTool(others, await options.read(tenantId));
  };
}
