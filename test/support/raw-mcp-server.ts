import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A hand-written MCP server (streamable HTTP, JSON answers) whose answer to
 * each JSON-RPC message a test scripts, for the misbehaviours the SDK's
 * own server (mcp-server.ts) cannot be made to show: endless pages, a
 * notification never answered, an HTTP error with a hostile body.
 */

export interface RawRpc {
  jsonrpc: '2.0';
  /** Absent on a notification. */
  id?: number | string;
  method: string;
  params?: unknown;
}

/** `request`: the HTTP request the message came in, for a script that quotes its headers. */
export type RawMcpScript = (
  message: RawRpc,
  response: ServerResponse,
  request: IncomingMessage,
) => void;

export interface RawMcpServer {
  /** The MCP endpoint, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  close(): Promise<void>;
}

/** What `initialize` answers when a script lets it through. */
export const INITIALIZE_RESULT = {
  protocolVersion: '2025-06-18',
  capabilities: { tools: {} },
  serverInfo: { name: 'raw', version: '1' },
};

type RawHandler = (request: IncomingMessage, response: ServerResponse) => void;

/**
 * `onGet` answers GET requests (the SDK's standalone or resumed event
 * stream), `onDelete` DELETE requests (the SDK ending the session a script
 * opened with an `mcp-session-id` header); without them they are 405, as a
 * server without either answers.
 */
export async function startRawMcpServer(
  script: RawMcpScript,
  onGet?: RawHandler,
  onDelete?: RawHandler,
): Promise<RawMcpServer> {
  const server = createServer(async (request: IncomingMessage, response) => {
    if (request.method === 'GET' && onGet) return onGet(request, response);
    if (request.method === 'DELETE' && onDelete) return onDelete(request, response);
    if (request.method !== 'POST') {
      response.writeHead(405).end();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    script(JSON.parse(Buffer.concat(chunks).toString()) as RawRpc, response, request);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Answers a request with its JSON-RPC result. */
export function replyResult(response: ServerResponse, id: RawRpc['id'], result: unknown): void {
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ jsonrpc: '2.0', id, result }));
}

/** Accepts a notification (no answer body). */
export function acceptNotification(response: ServerResponse): void {
  response.writeHead(202).end();
}
