import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  type RawMcpServer,
  type RawRpc,
  replyResult,
  startRawMcpServer,
} from '../support/raw-mcp-server.js';
import {
  expectNoSecretIn,
  MCP_TOKEN,
  TOOL_API_KEY,
  TOOL_TOKEN,
  useLeakCheckApp,
} from '../support/secret-leaks.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';

/**
 * Secrets never leave the process by the way of its output: the header
 * values stored with HTTP tools and MCP servers, API keys and stream tokens
 * are in no log line (the production logger, at trace), no API answer, no
 * workflow event and no prompt sent to a model, on the paths where they
 * are most likely to slip out: failures. (Provider keys:
 * provider-key-leaks.test.ts; the database password:
 * test/e2e/database-password-leaks.test.ts.) A server that quotes its own
 * credentials back (an echo endpoint, an error page showing the request,
 * "invalid token: …") must not hand them to the model.
 */

let tools: ToolServer;
let mcp: RawMcpServer;
/**
 * How the MCP server answers: well; `initialize` refused quoting the
 * token; `tools/call` quoting it; well, in a session whose end (DELETE)
 * it refuses quoting the token in its status line.
 */
let mcpMode: 'normal' | 'refuse-quoting' | 'result-quoting' | 'session-end-quoting' = 'normal';

beforeAll(async () => {
  tools = await startToolServer();
  tools.handle(answerToolCall);
  mcp = await startRawMcpServer(answerMcp, undefined, endMcpSession);
});
afterAll(async () => {
  await tools?.close();
  await mcp?.close();
});
// After the servers' hooks, so the app (after hooks run in reverse) closes before the servers it calls.
const h = useLeakCheckApp();

/** `/quote-500` fails quoting the request's headers, as a debugging error page does; `/echo` answers them, as httpbin does. */
function answerToolCall(call: { path: string; headers: object }, response: ServerResponse): void {
  const quoted = JSON.stringify({ received: call.headers });
  if (call.path === '/quote-500') {
    response.writeHead(500, { 'content-type': 'text/plain' });
    response.end(`internal error handling request ${quoted}`);
    return;
  }
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(quoted);
}

function answerMcp(message: RawRpc, response: ServerResponse, request: IncomingMessage): void {
  const authorization = String(request.headers.authorization);
  if (message.method === 'initialize' && mcpMode === 'refuse-quoting') {
    response.writeHead(401, { 'content-type': 'text/plain' });
    response.end(`invalid token: ${authorization}`);
    return;
  }
  if (message.method === 'initialize') {
    if (mcpMode === 'session-end-quoting') response.setHeader('mcp-session-id', 'session-1');
    replyResult(response, message.id, INITIALIZE_RESULT);
  } else if (message.id === undefined) {
    acceptNotification(response);
  } else if (message.method === 'tools/list') {
    // A listing generated per caller, its description and schema quoting the credentials.
    const as = { type: 'string', description: `defaults to ${authorization}` };
    replyResult(response, message.id, {
      tools: [
        {
          name: 'whoami',
          description: `Who holds ${authorization}`,
          inputSchema: { type: 'object', properties: { as } },
        },
        // Refused by the protocol's schema: skipped, named in the log.
        { name: `for ${authorization}`, inputSchema: { type: 'string' } },
      ],
    });
  } else {
    replyResult(response, message.id, {
      content: [
        { type: 'text', text: `you are the holder of ${authorization.replace(/^Bearer /, '')}` },
      ],
    });
  }
}

function endMcpSession(request: IncomingMessage, response: ServerResponse): void {
  if (mcpMode !== 'session-end-quoting') return void response.writeHead(405).end();
  response.writeHead(401, `invalid token: ${request.headers.authorization}`).end();
}

function promptsSince(first: number): string {
  return JSON.stringify(h.provider.requests.slice(first).map((request) => request.body));
}

async function registerTool(name: string, toolPath: string): Promise<void> {
  const response = await h.testApp.app.inject({
    method: 'POST',
    url: '/v1/tools',
    headers: bearer(h.tenant.key),
    payload: {
      name,
      description: 'A tool whose server needs credentials',
      parameters: { type: 'object', properties: {} },
      url: `${tools.origin}${toolPath}`,
      headers: { Authorization: `Bearer ${TOOL_TOKEN}`, 'X-Api-Key': TOOL_API_KEY },
    },
  });
  expect(response.statusCode, response.body).toBe(201);
  expectNoSecretIn('the registration’s answer', response.body);
}

describe('secrets stay out of logs, answers, events and prompts', () => {
  it('an HTTP tool’s header values: not listed, and a server quoting them (in a 500, in an echo) reaches neither the model nor the log', async () => {
    await registerTool('quoting_failure', '/quote-500');
    await registerTool('echo', '/echo');
    const listing = await h.testApp.app.inject({
      method: 'GET',
      url: '/v1/tools',
      headers: bearer(h.tenant.key),
    });
    expectNoSecretIn('the tool listing', listing.body);
    const first = h.provider.requests.length;
    const { workflow, events } = await h.runToEnd(
      'Use both tools',
      {
        kind: 'reply',
        toolCalls: [
          { id: 'call_failing', name: 'quoting_failure', arguments: {} },
          { id: 'call_echo', name: 'echo', arguments: {} },
        ],
      },
      { kind: 'reply', text: 'Both answered.' },
    );
    expect(workflow.status, JSON.stringify(workflow.error)).toBe('completed');
    // The servers did get the headers, and did quote them.
    expect(tools.calls.at(-1)?.headers.authorization).toBe(`Bearer ${TOOL_TOKEN}`);
    const prompts = promptsSince(first);
    expectNoSecretIn('the prompts', prompts);
    expect(prompts).toContain('internal error handling request');
    expect(prompts).toContain('[redacted]');
    expectNoSecretIn('the events', JSON.stringify(events));
    expectNoSecretIn('the log', h.logged);
  });

  it('an MCP server’s header value: quoted in its refusal at registration, at a run’s start, in its tool list and in a tool result, it is redacted', async () => {
    mcpMode = 'refuse-quoting';
    const refused = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(h.tenant.key),
      payload: {
        name: 'refusing',
        url: mcp.url,
        headers: { Authorization: `Bearer ${MCP_TOKEN}` },
      },
    });
    expect(refused.json()).toMatchObject({ code: 'mcp_unreachable' });
    expect(refused.body).toContain('invalid token');
    expectNoSecretIn('the refused registration’s answer', refused.body);

    mcpMode = 'normal';
    const registered = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(h.tenant.key),
      payload: { name: 'docs', url: mcp.url, headers: { Authorization: `Bearer ${MCP_TOKEN}` } },
    });
    expect(registered.statusCode, registered.body).toBe(201);
    expect(registered.body).toContain('Who holds [redacted]');
    expectNoSecretIn('the registration’s answer', registered.body);
    const listed = await h.testApp.app.inject({
      method: 'GET',
      url: '/v1/mcp-servers',
      headers: bearer(h.tenant.key),
    });
    expectNoSecretIn('the server listing', listed.body);

    mcpMode = 'result-quoting';
    const first = h.provider.requests.length;
    const called = await h.runToEnd(
      'Who am I?',
      { kind: 'reply', toolCalls: [{ id: 'call_whoami', name: 'docs__whoami', arguments: {} }] },
      { kind: 'reply', text: 'You are you.' },
    );
    expect(called.workflow.status).toBe('completed');
    expect(promptsSince(first)).toContain('you are the holder of');
    expectNoSecretIn('the prompts', promptsSince(first));

    mcpMode = 'refuse-quoting';
    const unavailable = await h.runToEnd('Who am I now?', { kind: 'reply', text: 'No idea.' });
    expect(unavailable.events.find((event) => event.type === 'warning')?.detail).toMatchObject({
      code: 'tool_source_unavailable',
      message: expect.stringContaining('invalid token'),
    });
    expectNoSecretIn('the events', JSON.stringify([called.events, unavailable.events]));
    expectNoSecretIn('the log', h.logged);
  });

  it('an MCP server refusing to end its session, quoting the header value in its status line: the debug line for it has the value redacted', async () => {
    mcpMode = 'session-end-quoting';
    try {
      const registered = await h.testApp.app.inject({
        method: 'POST',
        url: '/v1/mcp-servers',
        headers: bearer(h.tenant.key),
        payload: {
          name: 'sessioned',
          url: mcp.url,
          headers: { Authorization: `Bearer ${MCP_TOKEN}` },
        },
      });
      expect(registered.statusCode, registered.body).toBe(201);
      // Left out of the other tests' runs.
      await h.testApp.app.inject({
        method: 'DELETE',
        url: `/v1/mcp-servers/${(registered.json() as { id: string }).id}`,
        headers: bearer(h.tenant.key),
      });
    } finally {
      mcpMode = 'normal';
    }
    const line = h.logged.split('\n').find((text) => text.includes('ending an MCP session failed'));
    expect(line).toContain('invalid token: [redacted]');
    expectNoSecretIn('the log', h.logged);
  });

  it('a stream token in an events URL is redacted from the request log, its parameter name percent-encoded or not', async () => {
    const { id } = await h.runToEnd('Stream me', { kind: 'reply', text: 'Streamed.' });
    const issued = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/stream-token`,
      headers: bearer(h.tenant.key),
    });
    const { token } = issued.json() as { token: string };
    for (const name of ['token', 'tok%65n', '%74%6F%6B%65%6E']) {
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows/${id}/events?${name}=${token}`,
      });
      // Each spelling is the token to the server: it authenticates.
      expect(response.statusCode, name).toBe(200);
    }
    expect(h.logged).not.toContain(token);
  });

  it('an API key a client put in a URL (EventSource sends no header) is redacted from the request log, under any parameter name', async () => {
    const { id } = await h.runToEnd('Key in a URL', { kind: 'reply', text: 'Answered.' });
    for (const url of [
      `/v1/workflows/${id}/events?api_key=${h.tenant.key}`,
      `/v1/me?access_token=${h.tenant.key}&after=1`,
      `/v1/workflows/${id}/events?key%3D=${encodeURIComponent(h.tenant.key)}`,
    ]) {
      const response = await h.testApp.app.inject({ method: 'GET', url });
      // The key authenticates only in its header.
      expect(response.statusCode, url).toBe(401);
    }
    expect(h.logged).toContain('api_key=[redacted]');
    expect(h.logged).not.toContain(h.tenant.key);
  });

  it('a body that is not JSON: its 400 and the log line for it do not quote the body', async () => {
    const response = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/tools',
      headers: { ...bearer(h.tenant.key), 'content-type': 'application/json' },
      // A header value typed without its quotes.
      payload: `{"name":"unquoted","headers":{"X-Api-Key":${TOOL_API_KEY}}}`,
    });
    expect(response.json()).toMatchObject({ status: 400, code: 'malformed_json' });
    expect(response.body).not.toContain('tool-apikey');
    expect(h.logged).not.toContain('tool-apikey');
  });

  it('a constraint the insert breaks (a newer release’s NOT NULL column, mid-deploy): the log names table and constraint, not the failing row with its header values', async () => {
    // Filled in for the rows there, and left for the newer release's code to write.
    const { pool } = h.testApp.services.database;
    await pool.query(
      `ALTER TABLE http_tools ADD COLUMN added_by_a_newer_release text NOT NULL DEFAULT ''`,
    );
    await pool.query('ALTER TABLE http_tools ALTER COLUMN added_by_a_newer_release DROP DEFAULT');
    try {
      const response = await h.testApp.app.inject({
        method: 'POST',
        url: '/v1/tools',
        headers: bearer(h.tenant.key),
        payload: {
          name: 'mid_deploy',
          description: 'A tool registered while a newer release migrates',
          parameters: { type: 'object', properties: {} },
          url: `${tools.origin}/echo`,
          headers: { Authorization: `Bearer ${TOOL_TOKEN}`, 'X-Api-Key': TOOL_API_KEY },
        },
      });
      expect(response.statusCode).toBe(500);
      const { requestId } = response.json() as { requestId: string };
      const line = h.logged
        .split('\n')
        .find((text) => text.includes(requestId) && text.includes('"level":50'));
      expect(JSON.parse(line ?? '{}')).toMatchObject({
        err: {
          code: '23502',
          table: 'http_tools',
          column: 'added_by_a_newer_release',
          message: expect.stringContaining('violates not-null constraint'),
          // "Failing row contains (…)", the row's values each cut at 64 bytes: a secret's head no scrub matches.
          detail: '[redacted]',
        },
      });
      expectNoSecretIn('the log', h.logged);
    } finally {
      await pool.query('ALTER TABLE http_tools DROP COLUMN added_by_a_newer_release');
    }
  });

  it('a 500 says nothing of its cause (no SQL, relation, stack or host); the log has it', async () => {
    await h.testApp.services.database.pool.query(
      'ALTER TABLE http_tools RENAME TO http_tools_gone',
    );
    try {
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: '/v1/tools',
        headers: bearer(h.tenant.key),
      });
      expect(response.statusCode).toBe(500);
      expect(response.json()).toEqual({
        type: 'urn:waymark:problem:internal_error',
        title: 'Internal Server Error',
        status: 500,
        detail: 'An internal error occurred',
        instance: '/v1/tools',
        code: 'internal_error',
        requestId: expect.any(String),
      });
      const { requestId } = response.json() as { requestId: string };
      const line = h.logged
        .split('\n')
        .find((text) => text.includes(requestId) && text.includes('"level":50'));
      expect(line).toContain('http_tools');
    } finally {
      await h.testApp.services.database.pool.query(
        'ALTER TABLE http_tools_gone RENAME TO http_tools',
      );
    }
  });
});
