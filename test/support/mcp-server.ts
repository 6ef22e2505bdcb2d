import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

/**
 * A real MCP server (the SDK's McpServer over streamable HTTP) on
 * 127.0.0.1 with two tools:
 * - `add` {a, b}: the sum as text;
 * - `lookup` {key, delayMs?}: the value of a key after an optional delay,
 *   an `isError` result for an unknown key.
 * Stateless by default (a server and transport per request, as the SDK
 * documents for servers that keep nothing between requests); `stateful`
 * keeps a session per client, with its event stream and DELETE to end it.
 */

export interface McpTestServer {
  /** `http://127.0.0.1:<port>/mcp` */
  url: string;
  /** Every HTTP request received. */
  requests: { method: string; headers: IncomingHttpHeaders }[];
  /** The JSON-RPC method of every message POSTed (`initialize`, `tools/list`, `tools/call`, …). */
  rpcMethods: string[];
  /** Sessions open now (stateful only). */
  openSessions(): number;
  close(): Promise<void>;
}

const VALUES: Record<string, string> = {
  colour: 'blue',
  answer: '42',
  // Cut in the middle of an emoji, as a server truncating by UTF-16 units would: a lone surrogate.
  cut: 'smile 😀'.slice(0, -1),
  // PostgreSQL stores NUL in neither text nor jsonb.
  nul: 'a\u0000b',
};

export interface McpTestServerOptions {
  stateful?: boolean;
  /**
   * Lists a third tool, `broken`, whose input schema is not an object
   * schema (the SDK's client refuses such a list as a whole).
   */
  brokenTool?: boolean;
}

function buildServer(options: McpTestServerOptions): McpServer {
  const server = new McpServer({ name: 'test-mcp', version: '1.0.0' });
  server.registerTool(
    'add',
    {
      description: 'Adds two numbers',
      inputSchema: { a: z.number(), b: z.number() },
    },
    async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] }),
  );
  server.registerTool(
    'lookup',
    {
      description: 'Looks a key up',
      inputSchema: { key: z.string(), delayMs: z.number().int().optional() },
    },
    async ({ key, delayMs }) => {
      if (delayMs) await sleep(delayMs);
      const value = VALUES[key];
      if (value === undefined) {
        return { content: [{ type: 'text', text: `no such key: ${key}` }], isError: true };
      }
      return {
        content: [
          { type: 'text', text: `${key} = ${value}` },
          { type: 'image', data: 'AAAA', mimeType: 'image/png' },
        ],
      };
    },
  );
  if (options.brokenTool) {
    // The listing McpServer makes, plus a tool no client schema takes; calls still go to McpServer.
    server.server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [
        {
          name: 'add',
          inputSchema: {
            type: 'object',
            properties: { a: { type: 'number' }, b: { type: 'number' } },
          },
        },
        { name: 'broken', inputSchema: { type: 'string' } },
      ],
    }));
  }
  return server;
}

export async function startMcpTestServer(
  options: McpTestServerOptions = {},
): Promise<McpTestServer> {
  const requests: McpTestServer['requests'] = [];
  const rpcMethods: string[] = [];
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http = createServer(async (request, response) => {
    requests.push({ method: request.method ?? '', headers: request.headers });
    const body = request.method === 'POST' ? await readJson(request) : undefined;
    for (const message of Array.isArray(body) ? body : [body]) {
      const method = (message as { method?: unknown } | undefined)?.method;
      if (typeof method === 'string') rpcMethods.push(method);
    }
    if (options.stateful) {
      const sessionId = request.headers['mcp-session-id'];
      const existing = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
      if (existing) {
        await existing.handleRequest(request, response, body);
        return;
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => void sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await buildServer(options).connect(transport);
      await transport.handleRequest(request, response, body);
      return;
    }
    if (request.method !== 'POST') {
      // No standalone event stream on a stateless server.
      response.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const server = buildServer(options);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    response.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(request, response, body);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    requests,
    rpcMethods,
    openSessions: () => sessions.size,
    async close() {
      http.closeAllConnections();
      await new Promise<void>((resolve, reject) =>
        http.close((error) => (error ? reject(error) : resolve())),
      );
    },
  };
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}
