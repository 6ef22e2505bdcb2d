import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import { SECRET, tenantKeys, toolsApiHelpers, weatherParameters } from '../support/tools-api.js';

/** The tenant's HTTP tools as a workflow run gets them: its rows read as a run reads them. */
async function httpToolsOf(app: TestApp, tenantId: string) {
  const { endpoints } = await listTenantEndpoints(app.services.database.db, tenantId);
  return app.services.httpTools.toolsOf(tenantId, endpoints.httpTools);
}

/**
 * The local tool server is on 127.0.0.1, a private address: the main app
 * allows private addresses; `strict` (same database) keeps the default.
 * What registration refuses is in tools-api-validation.test.ts.
 */
let testApp: TestApp;
let strict: TestApp;
let server: ToolServer;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;
let tenantId: string;

beforeAll(async () => {
  server = await startToolServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  strict = await startTestAppOn(testApp.database);
  ({ adminKey, memberKey, otherTenantKey, tenantId } = await tenantKeys(testApp));
});
afterAll(async () => {
  await strict?.close();
  await testApp?.close();
  await server?.close();
});
beforeEach(() => {
  server.calls.length = 0;
});

const { toolBody, createTool } = toolsApiHelpers(() => ({ testApp, server, adminKey }));

async function get(url: string, key = adminKey) {
  return testApp.app.inject({ method: 'GET', url, headers: bearer(key) });
}

async function remove(id: string, key = adminKey) {
  return testApp.app.inject({ method: 'DELETE', url: `/v1/tools/${id}`, headers: bearer(key) });
}

describe('registering an HTTP tool', () => {
  it('answers 201 with the tool, its header names and defaults, never the header values', async () => {
    const body = toolBody();
    const response = await createTool(body);
    expect(response.statusCode).toBe(201);
    expect(response.json()).toEqual({
      builtin: false,
      id: expect.any(String),
      name: body.name,
      description: 'Current weather of a city',
      parameters: weatherParameters,
      url: `${server.origin}/weather`,
      headerNames: ['Authorization', 'X-Team'],
      timeoutMs: 15_000,
      sequential: false,
      requiresApproval: false,
      createdAt: expect.any(String),
    });
    expect(response.body).not.toContain('very-secret-token');
  });

  it('stores the header values, which the listing, get and OpenAPI never show', async () => {
    const created = (await createTool(toolBody())).json();
    const { rows } = await testApp.services.database.pool.query(
      'SELECT headers FROM http_tools WHERE id = $1',
      [created.id],
    );
    expect(rows[0].headers).toEqual({ Authorization: SECRET, 'X-Team': 'core' });
    for (const url of ['/v1/tools', `/v1/tools/${created.id}`]) {
      const response = await get(url);
      expect(response.statusCode, url).toBe(200);
      expect(response.body, url).not.toContain('very-secret-token');
    }
  });

  it('keeps the parameters schema as given, key order included (the model fills arguments in that order)', async () => {
    const parameters = {
      type: 'object',
      properties: {
        street: { type: 'string' },
        city: { type: 'string' },
        zip: { type: 'string', pattern: '^[0-9]{4}$' },
      },
      required: ['street', 'city'],
    };
    const created = (await createTool(toolBody({ parameters }))).json();
    const fetched = (await get(`/v1/tools/${created.id}`)).json();
    expect(JSON.stringify(fetched.parameters)).toBe(JSON.stringify(parameters));
  });

  it('keeps timeoutMs and sequential when given', async () => {
    const response = await createTool(toolBody({ timeoutMs: 500, sequential: true }));
    expect(response.json()).toMatchObject({ timeoutMs: 500, sequential: true });
  });

  it('requiresApproval is stored: the create, the get and the listing return it, and the workflow’s tool requires approval', async () => {
    const created = await createTool(toolBody({ requiresApproval: true }));
    expect(created.statusCode, created.body).toBe(201);
    const tool = created.json();
    expect(tool).toMatchObject({ requiresApproval: true });
    expect((await get(`/v1/tools/${tool.id}`)).json()).toMatchObject({ requiresApproval: true });
    const listed = (await get('/v1/tools')).json().items;
    expect(listed.find((item: { id?: string }) => item.id === tool.id)).toMatchObject({
      requiresApproval: true,
    });
    const tools = await httpToolsOf(testApp, tenantId);
    expect(tools.find((made) => made.name === tool.name)?.requiresApproval).toBe(true);
  });

  it('a second tool of the same name in the tenant is a 409; another tenant may use the name', async () => {
    const body = toolBody();
    expect((await createTool(body)).statusCode).toBe(201);
    const again = await createTool({ ...body, url: `${server.origin}/other` });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('tool_name_taken');
    expect((await createTool(body, { key: otherTenantKey })).statusCode).toBe(201);
  });

  it('needs the admin scope', async () => {
    const response = await createTool(toolBody(), { key: memberKey });
    expect(response.statusCode).toBe(403);
    expect(response.json().code).toBe('insufficient_scope');
  });
});

describe('listing, getting and deleting tools', () => {
  it('the listing has the built-ins marked builtin, then the tenant’s HTTP tools', async () => {
    const created = (await createTool(toolBody())).json();
    const response = await get('/v1/tools', memberKey);
    expect(response.statusCode).toBe(200);
    const items: { builtin: boolean; name: string; parameters: unknown }[] = response.json().items;
    const builtins = items.filter((item) => item.builtin);
    expect(builtins.map((item) => item.name)).toEqual(
      expect.arrayContaining(['ask_user', 'calculator', 'current_time']),
    );
    for (const builtin of builtins) expect(builtin.parameters).toMatchObject({ type: 'object' });
    expect(items.findIndex((item) => !item.builtin)).toBeGreaterThan(builtins.length - 1);
    expect(items.find((item) => item.name === created.name)).toEqual(created);
  });

  it('get by id answers the tool to a member key', async () => {
    const created = (await createTool(toolBody())).json();
    const response = await get(`/v1/tools/${created.id}`, memberKey);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual(created);
  });

  it('delete answers 204, then the tool is gone from get, listing and a second delete', async () => {
    const created = (await createTool(toolBody())).json();
    expect((await remove(created.id)).statusCode).toBe(204);
    expect((await get(`/v1/tools/${created.id}`)).statusCode).toBe(404);
    const names = (await get('/v1/tools')).json().items.map((item: { name: string }) => item.name);
    expect(names).not.toContain(created.name);
    expect((await remove(created.id)).statusCode).toBe(404);
  });

  it('delete needs the admin scope', async () => {
    const created = (await createTool(toolBody())).json();
    expect((await remove(created.id, memberKey)).statusCode).toBe(403);
  });

  it('another tenant’s tool answers 404 to get and delete and is not in its listing', async () => {
    const created = (await createTool(toolBody())).json();
    expect((await get(`/v1/tools/${created.id}`, otherTenantKey)).statusCode).toBe(404);
    expect((await remove(created.id, otherTenantKey)).statusCode).toBe(404);
    const listing = (await get('/v1/tools', otherTenantKey)).json();
    expect(listing.items.map((item: { id?: string }) => item.id)).not.toContain(created.id);
    expect((await get(`/v1/tools/${created.id}`)).statusCode).toBe(200);
  });

  it('a malformed id is a 400, an unknown one a 404', async () => {
    expect((await get('/v1/tools/not-a-uuid')).statusCode).toBe(400);
    const unknown = await get(`/v1/tools/${randomUUID()}`);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().code).toBe('not_found');
  });
});

describe('a registered tool in a workflow', () => {
  it('is among the tenant’s tools and, called, reaches the tool server with its stored headers and Idempotency-Key', async () => {
    const created = (await createTool(toolBody({ sequential: true }))).json();
    const tools = await httpToolsOf(testApp, tenantId);
    const tool = tools.find((candidate) => candidate.name === created.name);
    expect(tool).toMatchObject({ sequential: true, description: 'Current weather of a city' });
    const result = await tool?.execute(
      { city: 'Oslo' },
      {
        tenantId,
        workflowId: 'wf-9',
        step: 'turn-1',
        callId: 'call_a',
        signal: new AbortController().signal,
      },
    );
    expect(result).toEqual({ content: '{"received":{"city":"Oslo"}}' });
    expect(server.calls[0]?.headers).toMatchObject({
      authorization: SECRET,
      'x-team': 'core',
      'idempotency-key': 'wf-9:turn-1:call_a',
    });
  });

  it('another tenant’s tools do not include it', async () => {
    const created = (await createTool(toolBody())).json();
    const other = await testApp.services.tenancy.authenticate(otherTenantKey);
    const tools = await httpToolsOf(testApp, other?.tenant.id ?? '');
    expect(tools.map((tool) => tool.name)).not.toContain(created.name);
  });

  it('registered while private addresses were allowed, it is refused at call time once they are not', async () => {
    const created = (await createTool(toolBody())).json();
    const tool = (await httpToolsOf(strict, tenantId)).find(
      (candidate) => candidate.name === created.name,
    );
    const result = await tool?.execute(
      { city: 'Oslo' },
      {
        tenantId,
        workflowId: 'wf-9',
        step: 'turn-1',
        callId: 'call_b',
        signal: new AbortController().signal,
      },
    );
    expect(result).toEqual({
      isError: true,
      content: 'refused: 127.0.0.1 is a loopback address, which tools may not reach',
    });
    expect(server.calls).toHaveLength(0);
  });
});
