import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../support/mcp-server.js';
import { callJson } from '../support/tools-api.js';

/** GET /v1/mcp-servers/:id over real sockets. */
let testApp: TestApp;
let mcp: McpTestServer;
let base: string;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;
let tenantId: string;

const SECRET = 'Bearer mcp-secret-token-0815';

beforeAll(async () => {
  mcp = await startMcpTestServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  base = (await listenLocally(testApp.app)).url;
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
  tenantId = created.tenant.id;
  memberKey = (
    await testApp.services.tenancy.issueKey(tenantId, { name: 'member', scopes: ['member'] })
  ).secret;
  otherTenantKey = (await testApp.services.tenancy.createTenant({ name: 'other' })).adminKey.secret;
});
afterAll(async () => {
  await testApp?.close();
  await mcp?.close();
});

function call(request: { method: string; path: string; body?: unknown; key?: string }) {
  return callJson(base, { ...request, key: request.key ?? adminKey });
}

async function registered(extra: Record<string, unknown> = {}) {
  const name = `srv_${randomUUID().slice(0, 8)}`;
  const reply = await call({
    method: 'POST',
    path: '/v1/mcp-servers',
    body: { name, url: mcp.url, headers: { Authorization: SECRET }, ...extra },
  });
  expect(reply.status, reply.text).toBe(201);
  return reply.json;
}

const get = (id: string, key = adminKey) =>
  call({ method: 'GET', path: `/v1/mcp-servers/${id}`, key });

describe('GET /v1/mcp-servers/:id', () => {
  it('answers a member key with the server as the listing shows it, header values never', async () => {
    const server = await registered();
    const reply = await get(server.id, memberKey);
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json).toEqual(server);
    expect(reply.text).not.toContain('mcp-secret-token');
    const listed = await call({ method: 'GET', path: '/v1/mcp-servers', key: memberKey });
    expect(listed.json.items.find((item: { id: string }) => item.id === server.id)).toEqual(
      reply.json,
    );
  });

  it('another tenant’s server and an unknown id answer the same 404 problem; a malformed id 400', async () => {
    const server = await registered();
    const across = await get(server.id, otherTenantKey);
    const unknown = await get(randomUUID());
    for (const reply of [across, unknown]) {
      expect(reply.status, reply.text).toBe(404);
      expect(reply.contentType).toMatch(/^application\/problem\+json/);
      expect(reply.json).toMatchObject({ code: 'not_found', title: 'Not Found' });
    }
    expect(across.json.detail).toBe(unknown.json.detail);
    expect((await get('not-a-uuid')).status).toBe(400);
  });
});
