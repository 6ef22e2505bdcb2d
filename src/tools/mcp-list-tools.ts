import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { type Tool as McpListedTool, ToolSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { McpToolSnapshot } from '../store/schema.js';

/**
 * Tools one server may list: more than a model can choose among, and a
 * bound on what a server answering every page with a next cursor makes us
 * hold before the deadline (mcp-tools.ts `connectMcpServer`) ends it.
 */
export const MAX_LISTED_TOOLS = 256;

/** Every page of the server's `tools/list`; throws past MAX_LISTED_TOOLS. */
export async function listTools(
  client: Client,
  requestOptions: { timeout: number; signal: AbortSignal | undefined },
  skip: (skipped: { tool: string | undefined; reason: string }) => void,
): Promise<McpToolSnapshot[]> {
  const listed: McpToolSnapshot[] = [];
  let cursor: string | undefined;
  do {
    // The SDK leaves an abort listener on the signal of each request it
    // makes: each page gets a signal of its own, following the listing's,
    // for a server answering many pages not to pile them up on one.
    const { signal } = requestOptions;
    const pageOptions = { ...requestOptions, signal: signal && AbortSignal.any([signal]) };
    const page = await listPage(client, cursor, pageOptions, skip);
    for (const tool of page.tools) {
      listed.push({
        name: tool.name,
        ...(tool.description ? { description: tool.description } : {}),
        inputSchema: tool.inputSchema,
      });
    }
    if (listed.length > MAX_LISTED_TOOLS) {
      throw new Error(`it lists more than ${MAX_LISTED_TOOLS} tools`);
    }
    cursor = page.nextCursor;
  } while (cursor);
  return listed;
}

/** A `tools/list` page as it came, each tool to be checked on its own. */
const LOOSE_TOOL_LIST = z.looseObject({
  tools: z.array(z.unknown()),
  nextCursor: z.string().optional(),
});

/**
 * One page of `tools/list`. The SDK checks the whole page against its
 * schema, so one tool it refuses (an input schema that is not an object
 * schema, say) failed the listing, and every tool of the server was lost
 * (400 `mcp_unreachable` at registration, `tool_source_unavailable` in a
 * run): read again as it came, the tools the schema takes are kept and
 * the others skipped, each with its reason.
 */
async function listPage(
  client: Client,
  cursor: string | undefined,
  requestOptions: { timeout: number; signal: AbortSignal | undefined },
  skip: (skipped: { tool: string | undefined; reason: string }) => void,
): Promise<{ tools: McpListedTool[]; nextCursor?: string | undefined }> {
  const params = cursor ? { cursor } : undefined;
  try {
    return await client.listTools(params, requestOptions);
  } catch (error) {
    if (!isSchemaError(error)) throw error;
    const page = await client.request(
      { method: 'tools/list', params },
      LOOSE_TOOL_LIST,
      requestOptions,
    );
    const tools: McpListedTool[] = [];
    for (const raw of page.tools) {
      const checked = ToolSchema.safeParse(raw);
      if (checked.success) {
        tools.push(checked.data);
        continue;
      }
      const name = (raw as { name?: unknown } | null)?.name;
      const issue = checked.error.issues[0];
      skip({
        tool: typeof name === 'string' ? name : undefined,
        reason: `not a valid MCP tool: ${issue ? `${issue.path.join('.') || '(tool)'}: ${issue.message}` : 'refused'}`,
      });
    }
    return { tools, nextCursor: page.nextCursor };
  }
}

/** A zod validation failure (the SDK's result schemas), whatever copy of zod threw it. */
function isSchemaError(error: unknown): boolean {
  return error instanceof Error && Array.isArray((error as { issues?: unknown }).issues);
}
