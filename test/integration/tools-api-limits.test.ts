import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../support/mcp-server.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import { toolsApiHelpers } from '../support/tools-api.js';

/**
 * The per-tenant caps on registrations (HTTP_TOOLS_MAX_PER_TENANT,
 * MCP_SERVERS_MAX_PER_TENANT), both set to 2. Each test has a tenant of
 * its own, so each starts with none registered.
 */
const LIMIT = 2;
const RACERS = 8;

let testApp: TestApp;
let server: ToolServer;
let mcp: McpTestServer;

beforeAll(async () => {
  server = await startToolServer();
  mcp = await startMcpTestServer();
  testApp = await startTestApp({
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    HTTP_TOOLS_MAX_PER_TENANT: String(LIMIT),
    MCP_SERVERS_MAX_PER_TENANT: String(LIMIT),
  });
});
afterAll(async () => {
  await testApp?.close();
  await mcp?.close();
  await server?.close();
});

async function newTenant() {
  const created = await testApp.services.tenancy.createTenant({ name: `t-${randomUUID()}` });
  return { tenantId: created.tenant.id, key: created.adminKey.secret };
}

// Only its tool bodies are used: each test registers with its own tenant's key.
const { toolBody } = toolsApiHelpers(() => ({ testApp, server, adminKey: '' }));

/** The tenant's rows as a workflow run reads them. */
async function storedOf(tenantId: string) {
  return (await listTenantEndpoints(testApp.services.database.db, tenantId)).endpoints;
}

const kinds = [
  {
    kind: 'HTTP tools',
    path: '/v1/tools',
    code: 'tool_limit_reached',
    body: () => toolBody(),
    stored: async (tenantId: string) => (await storedOf(tenantId)).httpTools,
  },
  {
    kind: 'MCP servers',
    path: '/v1/mcp-servers',
    code: 'mcp_server_limit_reached',
    body: () => ({ name: `srv_${randomUUID().slice(0, 8)}`, url: mcp.url }),
    stored: async (tenantId: string) => (await storedOf(tenantId)).mcpServers,
  },
];

describe.each(kinds)('the per-tenant limit on $kind', ({ path, code, body, stored }) => {
  const create = (key: string, payload = body()) =>
    testApp.app.inject({ method: 'POST', url: path, headers: bearer(key), payload });

  it('refuses the registration past the limit with 409, naming the limit, and stores nothing', async () => {
    const { tenantId, key } = await newTenant();
    for (let i = 0; i < LIMIT; i++) expect((await create(key)).statusCode).toBe(201);
    const payload = body();
    const refused = await create(key, payload);
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.json()).toMatchObject({ code, current: { limit: LIMIT } });
    expect(refused.json().detail).toContain(`has ${LIMIT} `);
    const rows = await stored(tenantId);
    expect(rows).toHaveLength(LIMIT);
    expect(rows.map((row) => row.name)).not.toContain(payload.name);
  });

  it('frees a place when one is deleted', async () => {
    const { tenantId, key } = await newTenant();
    const first = await create(key);
    expect((await create(key)).statusCode).toBe(201);
    expect((await create(key)).statusCode).toBe(409);
    const removed = await testApp.app.inject({
      method: 'DELETE',
      url: `${path}/${first.json().id}`,
      headers: bearer(key),
    });
    expect(removed.statusCode).toBe(204);
    const payload = body();
    expect((await create(key, payload)).statusCode).toBe(201);
    expect((await stored(tenantId)).map((row) => row.name)).toContain(payload.name);
  });

  it(`of ${RACERS} concurrent registrations at one below the limit exactly one succeeds`, async () => {
    const { tenantId, key } = await newTenant();
    for (let i = 0; i < LIMIT - 1; i++) expect((await create(key)).statusCode).toBe(201);
    const replies = await Promise.all(Array.from({ length: RACERS }, () => create(key)));
    const statuses = replies.map((reply) => reply.statusCode).sort();
    expect(statuses).toEqual([201, ...Array(RACERS - 1).fill(409)]);
    for (const reply of replies.filter((r) => r.statusCode === 409))
      expect(reply.json().code).toBe(code);
    expect(await stored(tenantId)).toHaveLength(LIMIT);
  });
});

describe('an MCP server registration past the limit', () => {
  it('is refused before the server is contacted', async () => {
    const { key } = await newTenant();
    const create = () =>
      testApp.app.inject({
        method: 'POST',
        url: '/v1/mcp-servers',
        headers: bearer(key),
        payload: { name: `srv_${randomUUID().slice(0, 8)}`, url: mcp.url },
      });
    for (let i = 0; i < LIMIT; i++) expect((await create()).statusCode).toBe(201);
    const contacted = mcp.requests.length;
    const refused = await create();
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json()).toMatchObject({
      code: 'mcp_server_limit_reached',
      current: { limit: LIMIT },
    });
    expect(mcp.requests.length).toBe(contacted);
  });
});
