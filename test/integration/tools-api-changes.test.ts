import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import { callJson, tenantKeys, toolsApiHelpers } from '../support/tools-api.js';

/**
 * PATCH /v1/tools/:id over real sockets: each field changed alone, the
 * headers replaced whole and never shown, who may change what. What a
 * change refuses is in tools-api-validation.test.ts; that runs see it, in
 * orchestrator/tool-changes-in-runs.test.ts.
 */
let testApp: TestApp;
let server: ToolServer;
let base: string;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;
let tenantId: string;

const NEW_SECRET = 'Bearer rotated-token-0042';

beforeAll(async () => {
  server = await startToolServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  base = (await listenLocally(testApp.app)).url;
  ({ adminKey, memberKey, otherTenantKey, tenantId } = await tenantKeys(testApp));
});
afterAll(async () => {
  await testApp?.close();
  await server?.close();
});
beforeEach(() => {
  server.calls.length = 0;
});

const { toolBody } = toolsApiHelpers(() => ({ testApp, server, adminKey }));

async function created(overrides: Record<string, unknown> = {}) {
  const reply = await callJson(base, {
    key: adminKey,
    method: 'POST',
    path: '/v1/tools',
    body: toolBody(overrides),
  });
  expect(reply.status, reply.text).toBe(201);
  return reply.json;
}

function patch(id: string, body: unknown, key = adminKey) {
  return callJson(base, { key, method: 'PATCH', path: `/v1/tools/${id}`, body });
}

function get(id: string, key = adminKey) {
  return callJson(base, { key, method: 'GET', path: `/v1/tools/${id}` });
}

async function endpointsVersion(): Promise<string> {
  return (await listTenantEndpoints(testApp.services.database.db, tenantId)).version;
}

/** Calls the tenant's tool of that name as a run started now would, on the local tool server. */
async function callAsARun(name: string) {
  const { endpoints } = await listTenantEndpoints(testApp.services.database.db, tenantId);
  const tool = testApp.services.httpTools
    .toolsOf(tenantId, endpoints.httpTools)
    .find((candidate) => candidate.name === name);
  if (!tool) throw new Error(`no tool ${name}`);
  return tool.execute(
    { city: 'Oslo' },
    {
      tenantId,
      workflowId: 'wf-1',
      step: 'turn-1',
      callId: 'call_a',
      signal: new AbortController().signal,
    },
  );
}

describe('changing an HTTP tool', () => {
  it.each([
    ['description', 'Weather of a city, today'],
    [
      'parameters',
      {
        type: 'object',
        properties: { country: { type: 'string' }, city: { type: 'string' } },
        required: ['city'],
      },
    ],
    ['url', 'http://127.0.0.1:9/elsewhere'],
    ['timeoutMs', 2500],
    ['sequential', true],
    ['requiresApproval', true],
  ])(
    '%s alone: 200 with the tool changed, every other field as it was, as GET shows it',
    async (field, value) => {
      const tool = await created();
      const reply = await patch(tool.id, { [field]: value });
      expect(reply.status, reply.text).toBe(200);
      expect(reply.contentType).toMatch(/^application\/json/);
      expect(reply.json).toEqual({ ...tool, [field]: value });
      expect((await get(tool.id)).json).toEqual(reply.json);
      if (field === 'parameters') {
        // Stored as given, key order included, as at registration.
        expect(JSON.stringify(reply.json.parameters)).toBe(JSON.stringify(value));
      }
    },
  );

  it('several fields at once, and back again', async () => {
    const tool = await created();
    const changes = { description: 'Rain or shine', timeoutMs: 700, requiresApproval: true };
    expect((await patch(tool.id, changes)).json).toEqual({ ...tool, ...changes });
    const back = { description: tool.description, timeoutMs: 15_000, requiresApproval: false };
    expect((await patch(tool.id, back)).json).toEqual(tool);
  });

  it('headers replace all of the stored ones, are never shown, and the next call sends the new ones only', async () => {
    const tool = await created();
    expect(tool.headerNames).toEqual(['Authorization', 'X-Team']);
    const reply = await patch(tool.id, { headers: { Authorization: NEW_SECRET } });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json).toEqual({ ...tool, headerNames: ['Authorization'] });
    expect(reply.text).not.toContain('rotated-token');
    const { rows } = await testApp.services.database.pool.query(
      'SELECT headers FROM http_tools WHERE id = $1',
      [tool.id],
    );
    expect(rows[0].headers).toEqual({ Authorization: NEW_SECRET });
    for (const path of ['/v1/tools', `/v1/tools/${tool.id}`]) {
      const read = await callJson(base, { key: adminKey, method: 'GET', path });
      expect(read.text, path).not.toContain('rotated-token');
      expect(read.text, path).not.toContain('very-secret-token');
    }

    expect(await callAsARun(tool.name)).toEqual({ content: '{"received":{"city":"Oslo"}}' });
    expect(server.calls[0]?.headers.authorization).toBe(NEW_SECRET);
    expect(server.calls[0]?.headers['x-team']).toBeUndefined();

    const none = await patch(tool.id, { headers: {} });
    expect(none.json.headerNames).toEqual([]);
    await callAsARun(tool.name);
    expect(server.calls[1]?.headers.authorization).toBeUndefined();
  });

  it('a new url is where the next call goes', async () => {
    const tool = await created();
    await patch(tool.id, { url: `${server.origin}/moved?v=2` });
    await callAsARun(tool.name);
    expect(server.calls.map((call) => call.path)).toEqual(['/moved?v=2']);
  });

  it('a change bumps the tenant’s endpoints version, so runs read the tools again; an empty one writes nothing', async () => {
    const tool = await created();
    const before = await endpointsVersion();
    const same = await patch(tool.id, {});
    expect(same.status, same.text).toBe(200);
    expect(same.json).toEqual(tool);
    expect(await endpointsVersion()).toBe(before);
    await patch(tool.id, { requiresApproval: true });
    expect(await endpointsVersion()).not.toBe(before);
  });

  it('needs the admin scope: a member key gets 403 and the tool stays as it was', async () => {
    const tool = await created();
    const reply = await patch(tool.id, { description: 'Mine now' }, memberKey);
    expect(reply.status).toBe(403);
    expect(reply.json.code).toBe('insufficient_scope');
    expect((await get(tool.id)).json).toEqual(tool);
  });

  it('another tenant’s tool answers 404 as an unknown id does, and is not changed', async () => {
    const tool = await created();
    const across = await patch(tool.id, { requiresApproval: true }, otherTenantKey);
    const unknown = await patch(randomUUID(), { requiresApproval: true });
    for (const reply of [across, unknown]) {
      expect(reply.status, reply.text).toBe(404);
      expect(reply.contentType).toMatch(/^application\/problem\+json/);
      expect(reply.json.code).toBe('not_found');
    }
    expect((await get(tool.id)).json).toEqual(tool);
  });

  it('a deleted tool answers 404; a malformed id 400', async () => {
    const tool = await created();
    await callJson(base, { key: adminKey, method: 'DELETE', path: `/v1/tools/${tool.id}` });
    expect((await patch(tool.id, { description: 'Back?' })).status).toBe(404);
    expect((await patch('not-a-uuid', { description: 'x' })).status).toBe(400);
  });
});
