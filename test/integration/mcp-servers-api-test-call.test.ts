import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../support/mcp-server.js';
import { expectProblem } from '../support/problems.js';
import { tenantKeys } from '../support/tools-api.js';

/**
 * `POST /v1/mcp-servers/:id/test`: one call of one tool of an MCP server
 * (started in the test, streamable HTTP) outside any workflow.
 */

let testApp: TestApp;
let mcp: McpTestServer;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;

beforeAll(async () => {
  mcp = await startMcpTestServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  ({ adminKey, memberKey, otherTenantKey } = await tenantKeys(testApp));
});
afterAll(async () => {
  await testApp?.close();
  await mcp?.close();
});

async function registered(url = mcp.url): Promise<string> {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/mcp-servers',
    headers: bearer(adminKey),
    payload: { name: `srv_${randomUUID().slice(0, 8)}`, url },
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().id as string;
}

function testCall(id: string, body: Record<string, unknown>, key = adminKey) {
  return testApp.app.inject({
    method: 'POST',
    url: `/v1/mcp-servers/${id}/test`,
    headers: bearer(key),
    payload: body,
  });
}

const calls = () => mcp.rpcMethods.filter((method) => method === 'tools/call').length;

describe('a test call of an MCP server’s tool', () => {
  it('calls the tool by the name the server lists and answers its result', async () => {
    const id = await registered();
    const before = calls();
    const response = await testCall(id, { tool: 'add', arguments: { a: 2, b: 40 } });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ outcome: 'completed', isError: false, content: '42' });
    expect(calls()).toBe(before + 1);
    const failed = (await testCall(id, { tool: 'lookup', arguments: { key: 'nope' } })).json();
    expect(failed).toMatchObject({ outcome: 'failed', isError: true });
    expect(failed.content).toContain('no such key: nope');
  });

  it('arguments that do not fit are 400 invalid_arguments, a tool the server does not list 400 unknown_tool; neither is called', async () => {
    const id = await registered();
    const before = calls();
    expectProblem(
      await testCall(id, { tool: 'add', arguments: { a: 'two', b: 40 } }),
      400,
      'invalid_arguments',
    );
    const unknown = expectProblem(
      await testCall(id, { tool: 'subtract', arguments: {} }),
      400,
      'unknown_tool',
    );
    expect(unknown.errors).toEqual([{ field: 'body.tool', message: expect.any(String) }]);
    expect(calls()).toBe(before);
  });

  it('a server gone since its registration is 400 mcp_unreachable', async () => {
    const gone = await startMcpTestServer();
    const id = await registered(gone.url);
    await gone.close();
    const body = expectProblem(
      await testCall(id, { tool: 'add', arguments: { a: 1, b: 1 } }),
      400,
      'mcp_unreachable',
    );
    expect(body.detail).toContain('ECONNREFUSED');
  });

  it('needs the admin scope; another tenant’s server answers 404', async () => {
    const id = await registered();
    const body = { tool: 'add', arguments: { a: 1, b: 2 } };
    expectProblem(await testCall(id, body, memberKey), 403, 'insufficient_scope');
    expectProblem(await testCall(id, body, otherTenantKey), 404, 'not_found');
  });
});
