import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import type { Logger } from 'pino';
import { badRequest, conflict, notFound } from '../errors.js';
import type { Db } from '../store/database.js';
import type { HttpToolRow } from '../store/schema.js';
import {
  type EndpointChanges,
  insertEndpoint,
  tenantEndpointsRepository,
} from '../store/tenant-endpoints.js';
import { type HttpToolPolicy, isHostAllowed, toHttpTool } from './http-tool.js';
import {
  InvalidParametersSchema,
  type JsonSchemaObject,
  parametersFromJsonSchema,
} from './json-schema-parameters.js';
import { nonPublicRange, stripBrackets } from './network-guard.js';
import { BUILTIN_TOOL_NAMES } from './registry.js';
import type { Tool } from './types.js';

/**
 * HTTP tools of a tenant: registration and changes (checked against the
 * host policy and the built-ins' names), listing without secrets, and the
 * `Tool`s the registry offers a workflow of that tenant.
 */

export interface NewHttpTool {
  name: string;
  description: string;
  parameters: JsonSchemaObject;
  url: string;
  /** Header values are secrets: stored, sent with each call, never shown again. */
  headers: Record<string, string>;
  timeoutMs: number;
  sequential: boolean;
  requiresApproval: boolean;
}

/**
 * A change of an HTTP tool: the fields given, each checked as at
 * registration; `headers` replaces them all. Not its name, which workflows
 * name it by.
 */
export type HttpToolChanges = Partial<Omit<NewHttpTool, 'name'>>;

/** An HTTP tool as the API shows it: header names only. */
export interface HttpToolInfo {
  id: string;
  name: string;
  description: string;
  parameters: JsonSchemaObject;
  url: string;
  headerNames: string[];
  timeoutMs: number;
  sequential: boolean;
  requiresApproval: boolean;
  createdAt: Date;
}

export function createHttpToolsService(options: {
  db: Db;
  policy: HttpToolPolicy;
  log: Logger;
  /** HTTP_TOOLS_MAX_PER_TENANT: every workflow offers the model all of them, and model APIs refuse too many tools. */
  maxPerTenant: number;
  /** Told once one of a tenant's tools was registered, changed or removed (see workflows/early-start.ts). */
  onChanged: (tenantId: string) => void;
}) {
  const { db, policy } = options;
  async function get(tenantId: string, id: string): Promise<HttpToolInfo> {
    const row = await tenantEndpointsRepository(db, 'http_tools').findById(tenantId, id);
    if (!row) throw notFound('Tool');
    return toInfo(row);
  }
  return {
    async create(tenantId: string, input: NewHttpTool): Promise<HttpToolInfo> {
      if ((BUILTIN_TOOL_NAMES as readonly string[]).includes(input.name)) {
        throw badRequest('reserved_tool_name', `"${input.name}" is the name of a built-in tool`, [
          { field: 'body.name', message: 'must not be the name of a built-in tool' },
        ]);
      }
      checkParameters(input.parameters);
      const url = checkDestination(input.url, policy);
      const result = await insertEndpoint(db, {
        table: 'http_tools',
        limit: options.maxPerTenant,
        row: {
          id: randomUUID(),
          tenant_id: tenantId,
          name: input.name,
          description: input.description,
          parameters: JSON.stringify(input.parameters),
          url: url.href,
          headers: JSON.stringify(input.headers),
          timeout_ms: input.timeoutMs,
          sequential: input.sequential,
          requires_approval: input.requiresApproval,
        },
      });
      if ('refused' in result) {
        if (result.refused === 'name_taken') {
          throw conflict('tool_name_taken', `The tenant already has a tool named "${input.name}"`);
        }
        throw conflict(
          'tool_limit_reached',
          `The tenant has ${result.limit} HTTP tools, the most it may have (HTTP_TOOLS_MAX_PER_TENANT); delete one first`,
          { limit: result.limit },
        );
      }
      const row = result.inserted;
      options.onChanged(tenantId);
      return toInfo(row);
    },

    async list(tenantId: string): Promise<HttpToolInfo[]> {
      return (await tenantEndpointsRepository(db, 'http_tools').listByTenant(tenantId)).map(toInfo);
    },

    get,

    /**
     * Sets the fields `changes` gives (none: the tool as it is, nothing
     * written). Runs see the change from their next start or resume: the
     * write bumps the tenant's endpoints_version (migration 0014).
     */
    async update(tenantId: string, id: string, changes: HttpToolChanges): Promise<HttpToolInfo> {
      if (changes.parameters !== undefined) checkParameters(changes.parameters);
      const columns: EndpointChanges<'http_tools'> = {
        ...(changes.description !== undefined && { description: changes.description }),
        ...(changes.parameters !== undefined && {
          parameters: JSON.stringify(changes.parameters),
        }),
        ...(changes.url !== undefined && { url: checkDestination(changes.url, policy).href }),
        ...(changes.headers !== undefined && { headers: JSON.stringify(changes.headers) }),
        ...(changes.timeoutMs !== undefined && { timeout_ms: changes.timeoutMs }),
        ...(changes.sequential !== undefined && { sequential: changes.sequential }),
        ...(changes.requiresApproval !== undefined && {
          requires_approval: changes.requiresApproval,
        }),
      };
      if (Object.keys(columns).length === 0) return get(tenantId, id);
      const row = await tenantEndpointsRepository(db, 'http_tools').update(tenantId, id, columns);
      if (!row) throw notFound('Tool');
      options.onChanged(tenantId);
      return toInfo(row);
    },

    /** One of the tenant's HTTP tools as a workflow runs it (404 for none; 400 for a schema that no longer converts). */
    async toolOf(tenantId: string, id: string): Promise<Tool> {
      const row = await tenantEndpointsRepository(db, 'http_tools').findById(tenantId, id);
      if (!row) throw notFound('Tool');
      try {
        return toHttpTool(row, policy);
      } catch (error) {
        if (!(error instanceof InvalidParametersSchema)) throw error;
        throw badRequest('invalid_parameters_schema', error.message);
      }
    },

    async delete(tenantId: string, id: string): Promise<void> {
      if (!(await tenantEndpointsRepository(db, 'http_tools').delete(tenantId, id)))
        throw notFound('Tool');
      options.onChanged(tenantId);
    },

    /**
     * The tenant's HTTP tools (`rows`, from listTenantEndpoints) as `Tool`s for a workflow. A stored schema
     * that no longer converts (a zod upgrade changed what it accepts) drops
     * that one tool with a warning instead of failing the workflow.
     */
    toolsOf(tenantId: string, rows: HttpToolRow[]): Tool[] {
      const tools: Tool[] = [];
      for (const row of rows) {
        try {
          tools.push(toHttpTool(row, policy));
        } catch (error) {
          if (!(error instanceof InvalidParametersSchema)) throw error;
          options.log.warn(
            { tenantId, tool: row.name, reason: error.message },
            'HTTP tool skipped: its parameters schema no longer converts',
          );
        }
      }
      return tools;
    },
  };
}

export type HttpToolsService = ReturnType<typeof createHttpToolsService>;

function checkParameters(parameters: JsonSchemaObject): void {
  const problem = (message: string) =>
    badRequest('invalid_parameters_schema', `The parameters schema is not usable: ${message}`, [
      { field: 'body.parameters', message },
    ]);
  try {
    parametersFromJsonSchema(parameters);
  } catch (error) {
    if (error instanceof InvalidParametersSchema) throw problem(error.message);
    throw error;
  }
}

/**
 * The host policy at registration, so a tool that could never be called is
 * refused now. A host name's addresses are checked again at each call
 * (DNS changes); a literal private IP or `localhost` is refused here already.
 */
export function checkDestination(text: string, policy: HttpToolPolicy): URL {
  const refuse = (code: string, message: string) =>
    badRequest(code, message, [{ field: 'body.url', message }]);
  const url = new URL(text);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw refuse('invalid_url', 'The URL must be http or https');
  }
  if (url.username !== '' || url.password !== '') {
    throw refuse(
      'invalid_url',
      'The URL must not hold credentials (they would be shown in listings); send them in headers',
    );
  }
  if (!isHostAllowed(url.hostname, policy)) {
    throw refuse('host_not_allowed', `${url.hostname} is not among the hosts HTTP tools may call`);
  }
  if (!policy.allowPrivate) {
    const host = stripBrackets(url.hostname).replace(/\.$/, '');
    const range =
      isIP(host) !== 0
        ? nonPublicRange(host)
        : host === 'localhost' || host.endsWith('.localhost')
          ? 'loopback'
          : undefined;
    if (range !== undefined) {
      throw refuse(
        'private_address',
        `${url.hostname} is a ${range} address, which tools may not reach`,
      );
    }
  }
  return url;
}

function toInfo(row: HttpToolRow): HttpToolInfo {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    parameters: row.parameters,
    url: row.url,
    headerNames: Object.keys(row.headers).sort(),
    timeoutMs: row.timeout_ms,
    sequential: row.sequential,
    requiresApproval: row.requires_approval,
    createdAt: row.created_at,
  };
}
