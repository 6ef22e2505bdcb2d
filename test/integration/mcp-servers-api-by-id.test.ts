import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { listenLocally, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../support/mcp-server.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  replyResult,
  startRawMcpServer,
} from '../support/raw-mcp-server.js';
import { callJson, tenantKeys } from '../support/tools-api.js';

/**
 * GET and PATCH /v1/mcp-servers/:id over real sockets. A change of the
 * URL or headers connects to the server and lists its tools again, as a
 * registration does; the other fields change without a connection. That
 * runs see a change is in orchestrator/tool-changes-in-runs.test.ts.
 * `strict` (same database) keeps the default on private addresses,
 * `allowlisted` only allows *.example.com.
 */
let testApp: TestApp;
let strict: TestApp;
let allowlisted: TestApp;
let mcp: McpTestServer;
/** Lists only `add` (its `broken` tool is left out): another server's list. */
let other: McpTestServer;
const bases = new Map<TestApp, string>();
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;
let tenantId: string;

const SECRET = 'Bearer mcp-secret-token-0815';
const NEW_SECRET = 'Bearer mcp-rotated-token-4242';

beforeAll(async () => {
  mcp = await startMcpTestServer();
  other = await startMcpTestServer({ brokenTool: true });
  // Each test registers servers of its own, more than the default cap in all.
  testApp = await startTestApp({
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    MCP_SERVERS_MAX_PER_TENANT: '100',
  });
  strict = await startTestAppOn(testApp.database);
  allowlisted = await startTestAppOn(testApp.database, {
    HTTP_TOOLS_ALLOWED_HOSTS: '*.example.com',
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
  });
  for (const app of [testApp, strict, allowlisted]) {
    bases.set(app, (await listenLocally(app.app)).url);
  }
  ({ adminKey, memberKey, otherTenantKey, tenantId } = await tenantKeys(testApp));
});
afterAll(async () => {
  await allowlisted?.close();
  await strict?.close();
  await testApp?.close();
  await other?.close();
  await mcp?.close();
});

function call(
  request: { method: string; path: string; body?: unknown; key?: string },
  app = testApp,
) {
  return callJson(bases.get(app) ?? '', { ...request, key: request.key ?? adminKey });
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
const patch = (id: string, body: unknown, options: { key?: string; app?: TestApp } = {}) =>
  call({ method: 'PATCH', path: `/v1/mcp-servers/${id}`, body, key: options.key }, options.app);

async function endpointsVersion(): Promise<string> {
  return (await listTenantEndpoints(testApp.services.database.db, tenantId)).version;
}

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

describe('PATCH /v1/mcp-servers/:id', () => {
  it('requiresApproval and timeoutMs change without connecting to the server; an empty change writes nothing', async () => {
    const server = await registered();
    const before = mcp.rpcMethods.length;
    const version = await endpointsVersion();
    expect((await patch(server.id, {})).json).toEqual(server);
    expect(await endpointsVersion()).toBe(version);
    const reply = await patch(server.id, { requiresApproval: true, timeoutMs: 5000 });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json).toEqual({ ...server, requiresApproval: true, timeoutMs: 5000 });
    expect((await get(server.id)).json).toEqual(reply.json);
    expect(mcp.rpcMethods.length).toBe(before);
    expect(await endpointsVersion()).not.toBe(version);
  });

  it('headers replace all of the stored ones: the server is listed again with them, and they are never shown', async () => {
    const server = await registered();
    const before = mcp.requests.length;
    const reply = await patch(server.id, { headers: { 'X-Api-Key': NEW_SECRET } });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json).toEqual({ ...server, headerNames: ['X-Api-Key'] });
    expect(reply.text).not.toContain('rotated-token');
    const sent = mcp.requests.slice(before);
    expect(sent.length).toBeGreaterThan(0);
    for (const { headers } of sent) {
      expect(headers['x-api-key']).toBe(NEW_SECRET);
      expect(headers.authorization).toBeUndefined();
    }
    const { rows } = await testApp.services.database.pool.query(
      'SELECT headers FROM mcp_servers WHERE id = $1',
      [server.id],
    );
    expect(rows[0].headers).toEqual({ 'X-Api-Key': NEW_SECRET });
    for (const path of ['/v1/mcp-servers', `/v1/mcp-servers/${server.id}`]) {
      expect((await call({ method: 'GET', path })).text, path).not.toContain('rotated-token');
    }
  });

  it('a new url is listed: the server’s tools are then the new server’s', async () => {
    const server = await registered();
    const before = other.rpcMethods.length;
    const reply = await patch(server.id, { url: other.url });
    expect(reply.status, reply.text).toBe(200);
    expect(other.rpcMethods.slice(before)).toContain('tools/list');
    expect(reply.json).toMatchObject({ url: other.url, headerNames: ['Authorization'] });
    expect(reply.json.tools.map((tool: { toolName: string }) => tool.toolName)).toEqual([
      `${server.name}__add`,
    ]);
    expect((await get(server.id)).json).toEqual(reply.json);
  });

  it('a url change and a headers change racing: both are kept, and the tools are those the kept url and headers listed', async () => {
    const server = await registered();
    // The new url's server holds its first listing until released, and says whose headers each listing had.
    let releaseFirst: (() => void) | undefined;
    const firstHeld = new Promise<void>((resolve) => {
      releaseFirst = resolve;
    });
    let arrived: () => void = () => undefined;
    const firstArrived = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const listedWith: string[] = [];
    const moved = await startRawMcpServer((message, response, request) => {
      if (message.method === 'initialize') {
        replyResult(response, message.id, INITIALIZE_RESULT);
      } else if (message.id === undefined) {
        acceptNotification(response);
      } else {
        const keyHeader = request.headers['x-api-key'];
        listedWith.push(keyHeader === undefined ? 'Authorization' : 'X-Api-Key');
        const answer = () =>
          replyResult(response, message.id, {
            tools: [{ name: `listed_${listedWith.length}`, inputSchema: { type: 'object' } }],
          });
        if (listedWith.length > 1) return answer();
        arrived();
        void firstHeld.then(answer);
      }
    });
    try {
      const urlChange = patch(server.id, { url: moved.url });
      await firstArrived;
      // Meanwhile, a change of the headers alone (listed at the url the row still has).
      const headersChange = await patch(server.id, { headers: { 'X-Api-Key': NEW_SECRET } });
      expect(headersChange.status, headersChange.text).toBe(200);
      releaseFirst?.();
      const reply = await urlChange;
      expect(reply.status, reply.text).toBe(200);
      // Listed with the old headers, refused to be written; read again and listed with the new ones.
      expect(listedWith).toEqual(['Authorization', 'X-Api-Key']);
      const stored = (await get(server.id)).json;
      expect(stored).toMatchObject({ url: moved.url, headerNames: ['X-Api-Key'] });
      expect(stored.tools.map((tool: { toolName: string }) => tool.toolName)).toEqual([
        `${server.name}__listed_2`,
      ]);
      expect(reply.json).toEqual(stored);
    } finally {
      releaseFirst?.();
      await moved.close();
    }
  });

  it('a url change whose server’s headers change during each of its 3 listings gives up with 409 concurrent_change, changing nothing', async () => {
    const server = await registered();
    let listings = 0;
    const moved = await startRawMcpServer((message, response) => {
      if (message.method === 'initialize') {
        replyResult(response, message.id, INITIALIZE_RESULT);
      } else if (message.id === undefined) {
        acceptNotification(response);
      } else {
        listings += 1;
        // Another change of the headers commits while this listing runs.
        void testApp.services.database.pool
          .query('UPDATE mcp_servers SET headers = $1 WHERE id = $2', [
            JSON.stringify({ 'X-Changed': `change-${listings}-of-the-headers` }),
            server.id,
          ])
          .then(() => replyResult(response, message.id, { tools: [] }));
      }
    });
    try {
      const reply = await patch(server.id, { url: moved.url });
      expect(reply.status, reply.text).toBe(409);
      expect(reply.json).toMatchObject({ code: 'concurrent_change', status: 409 });
      expect(listings).toBe(3);
      expect((await get(server.id)).json).toMatchObject({
        url: mcp.url,
        headerNames: ['X-Changed'],
        tools: server.tools,
      });
    } finally {
      await moved.close();
    }
  });

  it('a server that cannot be used at the new url or with the new headers is a 400 mcp_unreachable, and nothing changes', async () => {
    const server = await registered();
    const closed = await startMcpTestServer();
    await closed.close();
    const reply = await patch(server.id, { url: closed.url, timeoutMs: 2000 });
    expect(reply.status, reply.text).toBe(400);
    expect(reply.json).toMatchObject({ code: 'mcp_unreachable', errors: [{ field: 'body.url' }] });
    expect(reply.json.detail).toContain('ECONNREFUSED');
    expect((await get(server.id)).json).toEqual(server);
  });

  it('new header values a server quotes, in its refusal or in its tool list, are redacted from the answer', async () => {
    const refusedToken = 'Bearer refused-token-9911';
    const acceptedToken = 'Bearer accepted-token-9922';
    // Refuses one token quoting it, as an error page may; lists a tool whose description quotes the other.
    const quoting = await startRawMcpServer((message, response, request) => {
      const authorization = String(request.headers.authorization);
      if (message.method === 'initialize' && authorization === refusedToken) {
        response.writeHead(401, { 'content-type': 'text/plain' });
        response.end(`invalid token: ${authorization}`);
      } else if (message.method === 'initialize') {
        replyResult(response, message.id, INITIALIZE_RESULT);
      } else if (message.id === undefined) {
        acceptNotification(response);
      } else {
        replyResult(response, message.id, {
          tools: [
            {
              name: 'whoami',
              description: `Who holds ${authorization}`,
              inputSchema: { type: 'object' },
            },
          ],
        });
      }
    });
    try {
      const server = await registered();
      const refused = await patch(server.id, {
        url: quoting.url,
        headers: { Authorization: refusedToken },
      });
      expect(refused.status, refused.text).toBe(400);
      expect(refused.json.code).toBe('mcp_unreachable');
      expect(refused.text).toContain('invalid token');
      expect(refused.text).not.toContain('refused-token');

      const accepted = await patch(server.id, { headers: { Authorization: acceptedToken } });
      expect(accepted.status, accepted.text).toBe(200);
      // Not moved by the refused change: the listing with the new headers was at the old URL.
      expect(accepted.json.url).toBe(mcp.url);
      const moved = await patch(server.id, { url: quoting.url });
      expect(moved.status, moved.text).toBe(200);
      expect(moved.json.tools[0].description).toBe('Who holds [redacted]');
      for (const reply of [moved, await get(server.id)]) {
        expect(reply.text).not.toContain('accepted-token');
      }
    } finally {
      await quoting.close();
    }
  });

  it.each([
    ['a name (its tools are named after it)', { name: 'renamed' }, 'validation_failed'],
    ['a url that is not http', { url: 'ftp://mcp.example.com/' }, 'validation_failed'],
    ['a url with credentials', { url: 'https://u:p@mcp.example.com/mcp' }, 'invalid_url'],
    ['a header the transport sets', { headers: { 'Mcp-Session-Id': 'x' } }, 'validation_failed'],
    ['a timeout over 120 s', { timeoutMs: 120_001 }, 'validation_failed'],
    ['an unknown field', { tools: [] }, 'validation_failed'],
  ])('%s is a 400 %s, and nothing changes', async (_what, changes, code) => {
    const server = await registered();
    const reply = await patch(server.id, changes);
    expect(reply.status, reply.text).toBe(400);
    expect(reply.json.code).toBe(code);
    expect((await get(server.id)).json).toEqual(server);
  });

  it('a private address is refused by default, a host off the allowlist always, before any connection', async () => {
    const server = await registered();
    const before = mcp.rpcMethods.length;
    const privateAddress = await patch(server.id, { url: mcp.url }, { app: strict });
    expect(privateAddress.status).toBe(400);
    expect(privateAddress.json).toMatchObject({
      code: 'private_address',
      errors: [{ field: 'body.url' }],
    });
    const offList = await patch(server.id, { url: mcp.url }, { app: allowlisted });
    expect(offList.status).toBe(400);
    expect(offList.json).toMatchObject({
      code: 'host_not_allowed',
      errors: [{ field: 'body.url' }],
    });
    expect(mcp.rpcMethods.length).toBe(before);
    expect((await get(server.id)).json).toEqual(server);
  });

  it('needs the admin scope; another tenant’s server answers 404 as an unknown id does; neither changes it', async () => {
    const server = await registered();
    const member = await patch(server.id, { requiresApproval: true }, { key: memberKey });
    expect(member.status).toBe(403);
    expect(member.json.code).toBe('insufficient_scope');
    for (const reply of [
      await patch(server.id, { requiresApproval: true }, { key: otherTenantKey }),
      await patch(server.id, { headers: {} }, { key: otherTenantKey }),
      await patch(randomUUID(), { headers: {} }),
    ]) {
      expect(reply.status, reply.text).toBe(404);
      expect(reply.json.code).toBe('not_found');
    }
    expect((await get(server.id)).json).toEqual(server);
  });
});
