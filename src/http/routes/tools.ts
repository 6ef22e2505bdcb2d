import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { toolParametersJsonSchema } from '../../llm/tool-arguments.js';
import { testTool } from '../../orchestrator/tool-test.js';
import type { HttpToolInfo, HttpToolsService } from '../../tools/http-tools-service.js';
import { MCP_TOOL_NAME_SEPARATOR } from '../../tools/mcp-tools.js';
import type { Tool } from '../../tools/types.js';
import { principalOf } from '../auth.js';
import { clientGoneSignal } from '../client-gone.js';
import { problemResponses } from '../problem.js';
import { storedHeadersSchema } from './header-schemas.js';
import { hasNoNul, hasNoNulInJson, idParamsSchema, NO_NUL_MESSAGE } from './schemas.js';
import { toolTestArguments, toolTestSchema } from './tool-test-schemas.js';

/**
 * Tools of the caller's tenant: its HTTP tools (registered here) and the
 * built-ins every tenant has. One HTTP tool is addressed by its id, like
 * every other resource; built-ins have no id and are only listed.
 */

/** Set by the service on every call; a stored value would be overridden or clash. */
const RESERVED_HEADERS = new Set([
  'content-type',
  'content-length',
  'transfer-encoding',
  'idempotency-key',
  'host',
  'connection',
]);

const toolNameSchema = z
  .string()
  .regex(
    /^[a-zA-Z][a-zA-Z0-9_-]{0,63}$/,
    'a letter, then letters, digits, _ or -, at most 64 characters',
  )
  // `<server>__<tool>` is how MCP servers' tools are named: an HTTP tool may not look like one.
  .refine(
    (name) => !name.includes(MCP_TOOL_NAME_SEPARATOR),
    `must not contain "${MCP_TOOL_NAME_SEPARATOR}", which names MCP servers' tools`,
  );

const parametersSchema = z
  .record(z.string(), z.unknown())
  .describe('JSON Schema of the arguments: an object schema, offered to the model as given');

const headersSchema = storedHeadersSchema(RESERVED_HEADERS);

/** The fields of a tool that a change may set too: all but its name, without the defaults of a new tool. */
const toolFields = {
  description: z
    .string()
    .trim()
    .min(1)
    .max(4000)
    .refine(hasNoNul, NO_NUL_MESSAGE)
    .describe('What the tool does and when to use it, for the model'),
  parameters: parametersSchema.refine(hasNoNulInJson, NO_NUL_MESSAGE),
  url: z
    .url({ protocol: /^https?$/, error: 'must be an http or https URL' })
    .max(2048)
    .describe('Called with POST and the arguments as a JSON body'),
  headers: headersSchema,
  timeoutMs: z.number().int().min(100).max(120_000),
  sequential: z.boolean(),
  requiresApproval: z.boolean(),
};

const HEADERS_DESCRIPTION =
  'Sent with every call, e.g. Authorization. Values are secrets: never shown again';
const SEQUENTIAL_DESCRIPTION =
  'Run one at a time, never alongside other tool calls of the same turn';
const APPROVAL_DESCRIPTION =
  'Each call waits for the user’s approval (`POST /v1/workflows/{id}/approve`); not offered to pipeline stages';

const createToolBody = z
  .object({
    name: toolNameSchema.describe('What the model calls the tool; unique in the tenant'),
    ...toolFields,
    headers: toolFields.headers.default({}).describe(HEADERS_DESCRIPTION),
    timeoutMs: toolFields.timeoutMs.default(15_000),
    sequential: toolFields.sequential.default(false).describe(SEQUENTIAL_DESCRIPTION),
    requiresApproval: toolFields.requiresApproval.default(false).describe(APPROVAL_DESCRIPTION),
  })
  .strict();

const updateToolBody = z
  .object({
    ...toolFields,
    headers: toolFields.headers.describe(
      `${HEADERS_DESCRIPTION}. Replaces all of them ({} removes them)`,
    ),
    sequential: toolFields.sequential.describe(SEQUENTIAL_DESCRIPTION),
    requiresApproval: toolFields.requiresApproval.describe(APPROVAL_DESCRIPTION),
  })
  .partial()
  .strict();

const httpToolSchema = z
  .object({
    builtin: z.literal(false),
    id: z.uuid(),
    name: z.string(),
    description: z.string(),
    parameters: parametersSchema,
    url: z.string(),
    headerNames: z
      .array(z.string())
      .describe('Names of the stored headers; their values are never returned'),
    timeoutMs: z.number().int(),
    sequential: z.boolean(),
    requiresApproval: z.boolean(),
    createdAt: z.iso.datetime(),
  })
  .meta({ id: 'HttpTool' });

const builtinToolSchema = z
  .object({
    builtin: z.literal(true),
    name: z.string(),
    description: z.string(),
    parameters: parametersSchema,
    timeoutMs: z.number().int(),
    sequential: z.boolean(),
  })
  .meta({ id: 'BuiltinTool' });

const toolSchema = z
  .discriminatedUnion('builtin', [httpToolSchema, builtinToolSchema])
  .meta({ id: 'Tool' });

function httpToolToWire(tool: HttpToolInfo): z.infer<typeof httpToolSchema> {
  return {
    builtin: false,
    id: tool.id,
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters,
    url: tool.url,
    headerNames: tool.headerNames,
    timeoutMs: tool.timeoutMs,
    sequential: tool.sequential,
    requiresApproval: tool.requiresApproval,
    createdAt: tool.createdAt.toISOString(),
  };
}

function builtinToolToWire(tool: Tool): z.infer<typeof builtinToolSchema> {
  return {
    builtin: true,
    name: tool.name,
    description: tool.description,
    parameters: toolParametersJsonSchema(tool),
    timeoutMs: tool.timeoutMs,
    sequential: tool.sequential ?? false,
  };
}

export const toolRoutes: FastifyPluginAsyncZod<{
  httpTools: HttpToolsService;
  builtins: readonly Tool[];
}> = async (app, { httpTools, builtins }) => {
  app.post(
    '/tools',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Register an HTTP tool for the caller’s tenant',
        description:
          'A call POSTs the arguments as JSON with the stored headers and an `Idempotency-Key` ' +
          'of workflow, step and call. The URL’s host must be allowed (`HTTP_TOOLS_ALLOWED_HOSTS`; ' +
          '400 `host_not_allowed`) and not a private address (400 `private_address`); the name ' +
          'must not be a built-in’s (400 `reserved_tool_name`) nor another tool’s of the tenant ' +
          '(409 `tool_name_taken`). A tenant with `HTTP_TOOLS_MAX_PER_TENANT` tools gets 409 ' +
          '`tool_limit_reached` until it deletes one.',
        body: createToolBody,
        response: { 201: httpToolSchema, ...problemResponses(400, 401, 403, 409, 413, 415, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const tool = await httpTools.create(tenant.id, request.body);
      return reply.code(201).send(httpToolToWire(tool));
    },
  );

  app.get(
    '/tools',
    {
      schema: {
        tags: ['tools'],
        summary: 'List the built-in tools and the HTTP tools of the caller’s tenant',
        description: 'Built-ins first (`builtin: true`), then HTTP tools by name.',
        response: {
          200: z.object({ items: z.array(toolSchema) }),
          ...problemResponses(401, 403, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const registered = await httpTools.list(tenant.id);
      return { items: [...builtins.map(builtinToolToWire), ...registered.map(httpToolToWire)] };
    },
  );

  app.get(
    '/tools/:id',
    {
      schema: {
        tags: ['tools'],
        summary: 'Get one HTTP tool of the caller’s tenant',
        params: idParamsSchema,
        response: { 200: httpToolSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return httpToolToWire(await httpTools.get(tenant.id, request.params.id));
    },
  );

  app.patch(
    '/tools/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Change an HTTP tool; workflows see the change from their next start or resume',
        description:
          'A field left out keeps its value; `headers` replaces all of them. Each field is ' +
          'checked as at registration (400 `host_not_allowed`, `private_address`, ' +
          '`invalid_parameters_schema`). The name cannot change: workflows name their tools by ' +
          'it. Without a version to match, the last of two concurrent changes wins, field by ' +
          'field. A call already waiting for approval still waits for it.',
        params: idParamsSchema,
        body: updateToolBody,
        response: { 200: httpToolSchema, ...problemResponses(400, 401, 403, 404, 413, 415, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return httpToolToWire(await httpTools.update(tenant.id, request.params.id, request.body));
    },
  );

  app.post(
    '/tools/:id/test',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Call an HTTP tool once, outside any workflow, to check it',
        description:
          'The arguments are checked against the tool’s parameters as a model’s call’s are ' +
          '(400 `invalid_arguments`), then the tool is called as a workflow calls it: its URL ' +
          'and headers, its timeout, the host rules, an `Idempotency-Key` ending with the ' +
          'answer’s `callId`. → 200 with what the tool loop reads: `outcome` (`completed`, ' +
          '`failed`, `timeout`), `isError`, `content` (header secrets redacted), `elapsedMs`. ' +
          'A tool that fails or times out is still a 200: its result says so.',
        params: idParamsSchema,
        body: z.object({ arguments: toolTestArguments }).strict(),
        response: {
          200: toolTestSchema,
          ...problemResponses(400, 401, 403, 404, 413, 415, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const tool = await httpTools.toolOf(tenant.id, request.params.id);
      return testTool(tool, {
        tenantId: tenant.id,
        args: request.body.arguments,
        signal: clientGoneSignal(reply),
      });
    },
  );

  app.delete(
    '/tools/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tools'],
        summary: 'Delete an HTTP tool; workflows started afterwards no longer see it',
        params: idParamsSchema,
        response: {
          204: z.null().describe('Deleted'),
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      await httpTools.delete(tenant.id, request.params.id);
      return reply.code(204).send(null);
    },
  );
};
