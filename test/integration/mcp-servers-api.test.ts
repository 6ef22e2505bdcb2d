import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import type { ToolContext } from '../../src/tools/types.js';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../support/mcp-server.js';
import { tenantKeys } from '../support/tools-api.js';

/** The tenant's MCP tools as a workflow run gets them: its rows read as a run reads them. */
async function mcpToolsOf(app: TestApp, tenantId: string) {
  const { endpoints } = await listTenantEndpoints(app.services.database.db, tenantId);
  return app.services.mcpServers.toolsOf(tenantId, endpoints.mcpServers);
}

/**
 * A real MCP server in the test (the SDK's McpServer over streamable HTTP
 * on 127.0.0.1). The main app allows private addresses; `strict` (same
 * database) keeps the default, `allowlisted` only allows *.example.com.
 */
let testApp: TestApp;
let strict: TestApp;
let allowlisted: TestApp;
let mcp: McpTestServer;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;
let tenantId: string;

const SECRET = 'Bearer mcp-secret-token-0815';

beforeAll(async () => {
  mcp = await startMcpTestServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  strict = await startTestAppOn(testApp.database);
  allowlisted = await startTestAppOn(testApp.database, {
    HTTP_TOOLS_ALLOWED_HOSTS: '*.example.com',
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
  });
  ({ adminKey, memberKey, otherTenantKey, tenantId } = await tenantKeys(testApp));
});
afterAll(async () => {
  await allowlisted?.close();
  await strict?.close();
  await testApp?.close();
  await mcp?.close();
});

function uniqueName(prefix = 'srv'): string {
  return `${prefix}_${randomUUID().slice(0, 8)}`;
}

async function register(
  payload: Record<string, unknown>,
  options: { app?: TestApp; key?: string } = {},
) {
  return (options.app ?? testApp).app.inject({
    method: 'POST',
    url: '/v1/mcp-servers',
    headers: bearer(options.key ?? adminKey),
    payload,
  });
}

function context(signal = new AbortController().signal): ToolContext {
  return { tenantId, workflowId: randomUUID(), step: 'turn-1', callId: 'call-1', signal };
}

describe('MCP servers API', () => {
  it('registers a server, lists its tools and never returns the header values', async () => {
    const name = uniqueName();
    const created = await register({ name, url: mcp.url, headers: { Authorization: SECRET } });
    expect(created.statusCode).toBe(201);
    expect(created.body).not.toContain('mcp-secret-token');
    const body = created.json();
    expect(body).toMatchObject({ name, url: mcp.url, headerNames: ['Authorization'] });
    expect(body.tools.map((tool: { toolName: string }) => tool.toolName)).toEqual([
      `${name}__add`,
      `${name}__lookup`,
    ]);
    expect(body.tools[0]).toMatchObject({
      name: 'add',
      description: 'Adds two numbers',
      problem: null,
      inputSchema: { type: 'object', required: ['a', 'b'] },
    });
    expect(mcp.requests.some(({ headers }) => headers.authorization === SECRET)).toBe(true);

    const listed = await testApp.app.inject({
      method: 'GET',
      url: '/v1/mcp-servers',
      headers: bearer(memberKey),
    });
    expect(listed.statusCode).toBe(200);
    expect(listed.body).not.toContain('mcp-secret-token');
    const mine = listed.json().items.find((item: { id: string }) => item.id === body.id);
    expect(mine).toEqual(body);
  });

  it('a name the tenant already uses is 409; a member key cannot register', async () => {
    const name = uniqueName();
    expect((await register({ name, url: mcp.url })).statusCode).toBe(201);
    const again = await register({ name, url: mcp.url });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('mcp_server_name_taken');
    expect(
      (await register({ name: uniqueName(), url: mcp.url }, { key: memberKey })).statusCode,
    ).toBe(403);
  });

  it('refuses bad names and headers the transport sets', async () => {
    const badName = await register({ name: 'Has-Caps', url: mcp.url });
    expect(badName.statusCode).toBe(400);
    const reserved = await register({
      name: uniqueName(),
      url: mcp.url,
      headers: { 'Mcp-Session-Id': 'x' },
    });
    expect(reserved.statusCode).toBe(400);
  });

  it('a server that cannot be reached is 400 mcp_unreachable with the reason', async () => {
    const closed = await startMcpTestServer();
    const url = closed.url;
    await closed.close();
    const response = await register({ name: uniqueName(), url, timeoutMs: 2000 });
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('mcp_unreachable');
    expect(response.json().detail).toContain('ECONNREFUSED');
  });

  it('a private address is refused by default and a host off the allowlist always', async () => {
    const privateAddress = await register({ name: uniqueName(), url: mcp.url }, { app: strict });
    expect(privateAddress.statusCode).toBe(400);
    expect(privateAddress.json().code).toBe('private_address');
    const offList = await register({ name: uniqueName(), url: mcp.url }, { app: allowlisted });
    expect(offList.statusCode).toBe(400);
    expect(offList.json().code).toBe('host_not_allowed');
  });

  it('another tenant neither sees nor deletes the server: 404', async () => {
    const created = (await register({ name: uniqueName(), url: mcp.url })).json();
    const theirs = await testApp.app.inject({
      method: 'GET',
      url: '/v1/mcp-servers',
      headers: bearer(otherTenantKey),
    });
    expect(theirs.json().items).toEqual([]);
    const deleteAcross = await testApp.app.inject({
      method: 'DELETE',
      url: `/v1/mcp-servers/${created.id}`,
      headers: bearer(otherTenantKey),
    });
    expect(deleteAcross.statusCode).toBe(404);
    const deleted = await testApp.app.inject({
      method: 'DELETE',
      url: `/v1/mcp-servers/${created.id}`,
      headers: bearer(adminKey),
    });
    expect(deleted.statusCode).toBe(204);
    const toolset = await mcpToolsOf(testApp, tenantId);
    try {
      expect(toolset.tools.map((tool) => tool.name)).not.toContain(`${created.name}__add`);
    } finally {
      await toolset.close();
    }
  });
});

describe('MCP tools in a workflow run', () => {
  it('are named <server>__<tool>, execute over the connection and map results', async () => {
    const name = uniqueName('run');
    expect(
      (await register({ name, url: mcp.url, headers: { Authorization: SECRET } })).statusCode,
    ).toBe(201);
    const toolset = await mcpToolsOf(testApp, tenantId);
    try {
      const add = toolset.tools.find((tool) => tool.name === `${name}__add`);
      const lookup = toolset.tools.find((tool) => tool.name === `${name}__lookup`);
      if (!add || !lookup) throw new Error('MCP tools missing');
      expect(add.description).toBe('Adds two numbers');
      expect(add.parameters.safeParse({ a: 2, b: 3 }).success).toBe(true);
      expect(add.parameters.safeParse({ a: 'two' }).success).toBe(false);

      expect(await add.execute({ a: 2, b: 3 }, context())).toEqual({ content: '5' });
      expect(await lookup.execute({ key: 'colour' }, context())).toEqual({
        content: 'colour = blue\n[image content, image/png, 3 bytes, not shown]',
      });
      expect(await lookup.execute({ key: 'nope' }, context())).toEqual({
        content: 'no such key: nope',
        isError: true,
      });
    } finally {
      await toolset.close();
    }
  });

  it('requiresApproval is stored and listed (false unless given), and covers every tool of the server', async () => {
    const name = uniqueName('appr');
    const created = await register({ name, url: mcp.url, requiresApproval: true });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toMatchObject({ requiresApproval: true });
    const plain = await register({ name: uniqueName('plain'), url: mcp.url });
    expect(plain.json()).toMatchObject({ requiresApproval: false });
    const listed = await testApp.app.inject({
      method: 'GET',
      url: '/v1/mcp-servers',
      headers: bearer(adminKey),
    });
    const mine = listed.json().items.find((item: { id: string }) => item.id === created.json().id);
    expect(mine).toMatchObject({ requiresApproval: true });
    const toolset = await mcpToolsOf(testApp, tenantId);
    try {
      const own = toolset.tools.filter((tool) => tool.name.startsWith(`${name}__`));
      expect(own.map((tool) => tool.requiresApproval)).toEqual([true, true]);
      const other = toolset.tools.find((tool) => tool.name.startsWith(`${plain.json().name}__`));
      expect(other?.requiresApproval).toBe(false);
    } finally {
      await toolset.close();
    }
  });

  it('a call past the server’s timeout is an error result; so is a cancelled call', async () => {
    const name = uniqueName('slow');
    expect((await register({ name, url: mcp.url, timeoutMs: 500 })).statusCode).toBe(201);
    // The 500 ms bound listing the tools too: on a loaded host a listing may miss it; the calls are what is tested.
    const { toolset, lookup } = await vi.waitFor(
      async () => {
        const listed = await mcpToolsOf(testApp, tenantId);
        const found = listed.tools.find((tool) => tool.name === `${name}__lookup`);
        if (found) return { toolset: listed, lookup: found };
        await listed.close();
        throw new Error('MCP tool missing');
      },
      { timeout: 15_000, interval: 100 },
    );
    try {
      const started = Date.now();
      const slow = await lookup.execute({ key: 'colour', delayMs: 3000 }, context());
      expect(slow).toEqual({ content: 'the tool did not answer within 500 ms', isError: true });
      expect(Date.now() - started).toBeLessThan(2500);

      const cancel = new AbortController();
      const pending = lookup.execute({ key: 'colour', delayMs: 3000 }, context(cancel.signal));
      setTimeout(() => cancel.abort(new Error('cancelled')), 50);
      expect(await pending).toEqual({ content: 'the call was cancelled', isError: true });
    } finally {
      await toolset.close();
    }
  });

  it('a server down at run time is reported unavailable, not a failed run', async () => {
    const transient = await startMcpTestServer();
    const name = uniqueName('gone');
    expect((await register({ name, url: transient.url, timeoutMs: 2000 })).statusCode).toBe(201);
    await transient.close();
    const toolset = await mcpToolsOf(testApp, tenantId);
    try {
      expect(toolset.tools.some((tool) => tool.name.startsWith(`${name}__`))).toBe(false);
      expect(toolset.unavailable).toContainEqual({
        server: name,
        reason: expect.stringContaining('ECONNREFUSED'),
      });
    } finally {
      await toolset.close();
    }
  });

  it('a private address is refused at run time too, by the guarded connection', async () => {
    const name = uniqueName('priv');
    expect((await register({ name, url: mcp.url })).statusCode).toBe(201);
    // `strict` shares the database but not HTTP_TOOLS_ALLOW_PRIVATE.
    const toolset = await mcpToolsOf(strict, tenantId);
    try {
      expect(toolset.tools.some((tool) => tool.name.startsWith(`${name}__`))).toBe(false);
      expect(toolset.unavailable).toContainEqual({
        server: name,
        reason: expect.stringMatching(/^refused: 127\.0\.0\.1 is a loopback address/),
      });
    } finally {
      await toolset.close();
    }
  });

  it('with a stateful server: one session per run, ended when the run closes its tools', async () => {
    const stateful = await startMcpTestServer({ stateful: true });
    try {
      const name = uniqueName('sess');
      expect((await register({ name, url: stateful.url })).statusCode).toBe(201);
      // Registration ended its own session.
      expect(stateful.openSessions()).toBe(0);
      const toolset = await mcpToolsOf(testApp, tenantId);
      const add = toolset.tools.find((tool) => tool.name === `${name}__add`);
      if (!add) throw new Error('MCP tool missing');
      expect(await add.execute({ a: 1, b: 1 }, context())).toEqual({ content: '2' });
      expect(await add.execute({ a: 2, b: 2 }, context())).toEqual({ content: '4' });
      expect(stateful.openSessions()).toBe(1);
      await toolset.close();
      expect(stateful.openSessions()).toBe(0);
      expect(stateful.requests.filter(({ method }) => method === 'DELETE')).toHaveLength(2);
    } finally {
      await stateful.close();
    }
  });
});
