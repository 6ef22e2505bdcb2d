import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { testTool } from '../../orchestrator/tool-test.js';
import type { McpServerInfo, McpServersService } from '../../tools/mcp-servers-service.js';
import { principalOf } from '../auth.js';
import { clientGoneSignal } from '../client-gone.js';
import { problemResponses } from '../problem.js';
import { storedHeadersSchema } from './header-schemas.js';
import { idParamsSchema } from './schemas.js';
import { toolTestArguments, toolTestSchema } from './tool-test-schemas.js';

/**
 * MCP servers of the caller's tenant (streamable HTTP transport). Their
 * tools are offered to the tenant's workflows as `<server name>__<tool name>`.
 */

/** Set by the MCP transport on every request; a stored value would clash. */
const RESERVED_HEADERS = new Set([
  'accept',
  'content-type',
  'content-length',
  'transfer-encoding',
  'host',
  'connection',
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
]);

/** The fields of a server that a change may set too: all but its name, without the defaults of a new server. */
const serverFields = {
  url: z
    .url({ protocol: /^https?$/, error: 'must be an http or https URL' })
    .max(2048)
    .describe('The server’s streamable HTTP endpoint, e.g. https://mcp.example.com/mcp'),
  headers: storedHeadersSchema(RESERVED_HEADERS),
  timeoutMs: z
    .number()
    .int()
    .min(100)
    .max(120_000)
    .describe('For connecting, listing the tools, and each tool call'),
  requiresApproval: z.boolean(),
};

const HEADERS_DESCRIPTION =
  'Sent with every request, e.g. Authorization. Values are secrets: never shown again';
const APPROVAL_DESCRIPTION =
  'Each call of any of its tools waits for the user’s approval (`POST /v1/workflows/{id}/approve`); its tools are not offered to pipeline stages';

const createMcpServerBody = z
  .object({
    name: z
      .string()
      .max(32)
      // No `__` and no `_` at the end: the first `__` of `<name>__<tool>` is then
      // the separator, so two servers' tools never share a name (`a` + `b__c`
      // and `a__b` + `c`).
      .regex(
        /^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/,
        'a lower-case letter, then lower-case letters and digits, single _ between them, at most 32 characters',
      )
      .describe('Unique in the tenant; the prefix of its tools’ names (`<name>__<tool>`)'),
    ...serverFields,
    headers: serverFields.headers.default({}).describe(HEADERS_DESCRIPTION),
    timeoutMs: serverFields.timeoutMs.default(30_000),
    requiresApproval: serverFields.requiresApproval.default(false).describe(APPROVAL_DESCRIPTION),
  })
  .strict();

const updateMcpServerBody = z
  .object({
    ...serverFields,
    headers: serverFields.headers.describe(
      `${HEADERS_DESCRIPTION}. Replaces all of them ({} removes them)`,
    ),
    requiresApproval: serverFields.requiresApproval.describe(APPROVAL_DESCRIPTION),
  })
  .partial()
  .strict();

const mcpServerToolSchema = z.object({
  name: z.string().describe('The server’s name for the tool'),
  toolName: z
    .string()
    .nullable()
    .describe('What the model calls it; null when it cannot be offered (see `problem`)'),
  description: z.string().nullable(),
  inputSchema: z.record(z.string(), z.unknown()),
  problem: z.string().nullable(),
});

const mcpServerSchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    url: z.string(),
    headerNames: z
      .array(z.string())
      .describe('Names of the stored headers; their values are never returned'),
    timeoutMs: z.number().int(),
    requiresApproval: z.boolean(),
    tools: z
      .array(mcpServerToolSchema)
      .describe(
        'As the server listed them at registration or at the last change of its URL or headers; workflows list them live',
      ),
    createdAt: z.iso.datetime(),
  })
  .meta({ id: 'McpServer' });

function toWire(server: McpServerInfo): z.infer<typeof mcpServerSchema> {
  return { ...server, createdAt: server.createdAt.toISOString() };
}

export const mcpServerRoutes: FastifyPluginAsyncZod<{ mcpServers: McpServersService }> = async (
  app,
  { mcpServers },
) => {
  app.post(
    '/mcp-servers',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Register an MCP server for the caller’s tenant',
        description:
          'The URL is checked like an HTTP tool’s (400 `host_not_allowed`, `private_address`), ' +
          'then the server is connected once to list its tools: 400 `mcp_unreachable` with the ' +
          'reason when that fails. The name must not be another server’s of the tenant ' +
          '(409 `mcp_server_name_taken`). A tenant with `MCP_SERVERS_MAX_PER_TENANT` servers gets ' +
          '409 `mcp_server_limit_reached` until it deletes one.',
        body: createMcpServerBody,
        response: { 201: mcpServerSchema, ...problemResponses(400, 401, 403, 409, 413, 415, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const server = await mcpServers.create(tenant.id, request.body);
      return reply.code(201).send(toWire(server));
    },
  );

  app.get(
    '/mcp-servers',
    {
      schema: {
        tags: ['tools'],
        summary: 'List the MCP servers of the caller’s tenant, by name',
        description:
          'Each server’s tools are shown as listed at registration (no connection is made); ' +
          'workflows list them live.',
        response: {
          200: z.object({ items: z.array(mcpServerSchema) }),
          ...problemResponses(401, 403, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return { items: (await mcpServers.list(tenant.id)).map(toWire) };
    },
  );

  app.get(
    '/mcp-servers/:id',
    {
      schema: {
        tags: ['tools'],
        summary: 'Get one MCP server of the caller’s tenant',
        description: 'As in the listing: its tools as stored, no connection is made.',
        params: idParamsSchema,
        response: { 200: mcpServerSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return toWire(await mcpServers.get(tenant.id, request.params.id));
    },
  );

  app.patch(
    '/mcp-servers/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Change an MCP server; workflows see the change from their next start or resume',
        description:
          'A field left out keeps its value; `headers` replaces all of them. A new `url` is ' +
          'checked as at registration (400 `host_not_allowed`, `private_address`). A change ' +
          'naming `url` or `headers` connects to the server with them and lists its tools again ' +
          '(400 `mcp_unreachable` with the reason, and nothing changed, when that fails); the ' +
          'server’s `tools` are then the new list. The name cannot change: its tools are named ' +
          'after it. Without a version to match, the last of two concurrent changes wins, field ' +
          'by field; URL, headers and tools are written together, only if the URL and headers ' +
          'are still those the change listed with: otherwise it reads, connects and lists again ' +
          '(409 `concurrent_change` after 3 tries). A call already waiting for approval still ' +
          'waits for it.',
        params: idParamsSchema,
        body: updateMcpServerBody,
        response: {
          200: mcpServerSchema,
          ...problemResponses(400, 401, 403, 404, 409, 413, 415, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return toWire(await mcpServers.update(tenant.id, request.params.id, request.body));
    },
  );

  app.post(
    '/mcp-servers/:id/test',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Call one tool of an MCP server once, outside any workflow, to check it',
        description:
          'Connects to the server, lists its tools and calls `tool` (its name as the server ' +
          'lists it, without the `<server>__` prefix) as a workflow calls it, its arguments ' +
          'checked against its input schema first (400 `invalid_arguments`). 400 ' +
          '`mcp_unreachable` when the server cannot be used, `unknown_tool` when it lists no ' +
          'such tool (or one left out of workflows, with a `problem`). → 200 as for an HTTP ' +
          'tool’s test call.',
        params: idParamsSchema,
        body: z
          .object({
            tool: z.string().min(1).max(200).describe('The tool’s name as the server lists it'),
            arguments: toolTestArguments,
          })
          .strict(),
        response: {
          200: toolTestSchema,
          ...problemResponses(400, 401, 403, 404, 413, 415, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const signal = clientGoneSignal(reply);
      const { tool, close } = await mcpServers.toolForTest(
        tenant.id,
        request.params.id,
        request.body.tool,
      );
      try {
        return await testTool(tool, { tenantId: tenant.id, args: request.body.arguments, signal });
      } finally {
        await close();
      }
    },
  );

  app.delete(
    '/mcp-servers/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Delete an MCP server; workflows started afterwards no longer see its tools',
        params: idParamsSchema,
        response: {
          204: z.null().describe('Deleted'),
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      await mcpServers.delete(tenant.id, request.params.id);
      return reply.code(204).send(null);
    },
  );
};
