import type { IncomingMessage, ServerResponse } from 'node:http';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { McpServerRow } from '../../../src/store/schema.js';
import { connectMcpTools } from '../../../src/tools/mcp-tools.js';
import type { ToolContext, ToolResult } from '../../../src/tools/types.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  type RawMcpServer,
  type RawRpc,
  replyResult,
  startRawMcpServer,
} from '../../support/raw-mcp-server.js';

/**
 * A tool call whose answering event stream ends without the call's result
 * (the server crashed, a proxy cut the connection) fails at once with a
 * message saying so, instead of after the server's whole timeout as a
 * timeout. A server that made its stream resumable (an event id) is left
 * to the SDK's reconnection.
 */

let server: RawMcpServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** Far past the test's own timeout: a call that waits for it fails the test. */
const TIMEOUT_MS = 60_000;

type CallScript = (message: RawRpc, response: ServerResponse) => void;

async function callThrough(
  onCall: CallScript,
  onGet?: (request: IncomingMessage, response: ServerResponse) => void,
  /** Calls made at once, all with the same context. */
  count = 1,
) {
  const calls: RawRpc[] = [];
  server = await startRawMcpServer((message, response) => {
    if (message.method === 'initialize')
      return replyResult(response, message.id, INITIALIZE_RESULT);
    if (message.id === undefined) return acceptNotification(response);
    if (message.method === 'tools/list') {
      return replyResult(response, message.id, {
        tools: [{ name: 'work', inputSchema: { type: 'object' } }],
      });
    }
    calls.push(message);
    onCall(message, response);
  }, onGet);
  const row = {
    id: 'server-1',
    tenant_id: 'tenant-1',
    name: 'raw',
    url: server.url,
    headers: {},
    timeout_ms: TIMEOUT_MS,
  } as unknown as McpServerRow;
  const toolset = await connectMcpTools([row], {
    policy: { allowedHosts: [], allowPrivate: true },
    log: pino({ level: 'silent' }),
  });
  const tool = toolset.tools[0];
  if (!tool) throw new Error(`no tool listed: ${JSON.stringify(toolset.unavailable)}`);
  const ctx: ToolContext = {
    tenantId: 'tenant-1',
    workflowId: 'wf-1',
    step: 'turn-1',
    callId: 'call_0',
    signal: new AbortController().signal,
  };
  try {
    const results = await Promise.all(Array.from({ length: count }, () => tool.execute({}, ctx)));
    return { result: results[0] as ToolResult, results, calls };
  } finally {
    await toolset.close();
  }
}

function openStream(response: ServerResponse): void {
  response.writeHead(200, { 'content-type': 'text/event-stream' });
  response.write(': working\n\n');
}

describe('a tool call whose event stream ends without its result', () => {
  it('the connection dropped mid-call: an error result saying so, not a timeout', async () => {
    const { result } = await callThrough((_message, response) => {
      openStream(response);
      setTimeout(() => response.socket?.destroy(), 50);
    });
    expect(result.isError).toBe(true);
    expect(result.content).toContain('the raw MCP server closed the call before answering');
  }, 10_000);

  it('the stream ended cleanly with no result: the same', async () => {
    const { result } = await callThrough((_message, response) => {
      openStream(response);
      setTimeout(() => response.end(), 50);
    });
    expect(result).toMatchObject({ isError: true });
    expect(result.content).toContain('closed the call before answering');
  }, 10_000);

  it('the result as the stream ends: the result', async () => {
    const { result } = await callThrough((message, response) => {
      openStream(response);
      const rpc = {
        jsonrpc: '2.0',
        id: message.id,
        result: { content: [{ type: 'text', text: 'done' }] },
      };
      response.end(`event: message\ndata: ${JSON.stringify(rpc)}\n\n`);
    });
    expect(result).toEqual({ content: 'done' });
  }, 10_000);

  it('a resumable stream (it gave an event id) is resumed, its result read from the new stream', async () => {
    let callId: RawRpc['id'];
    let resumedFrom: string | undefined;
    const { result } = await callThrough(
      (message, response) => {
        callId = message.id;
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.end('id: ev-1\nretry: 10\ndata: \n\n');
      },
      (request, response) => {
        resumedFrom = request.headers['last-event-id'] as string | undefined;
        if (resumedFrom === undefined) return void response.writeHead(405).end();
        const rpc = {
          jsonrpc: '2.0',
          id: callId,
          result: { content: [{ type: 'text', text: 'resumed' }] },
        };
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.end(`id: ev-2\ndata: ${JSON.stringify(rpc)}\n\n`);
      },
    );
    expect(resumedFrom).toBe('ev-1');
    expect(result).toEqual({ content: 'resumed' });
  }, 10_000);

  it('two calls with one idempotency key (a model repeating a call id): the first ending does not fail the second', async () => {
    let seen = 0;
    const { results } = await callThrough(
      (message, response) => {
        const which = ++seen;
        openStream(response);
        const rpc = {
          jsonrpc: '2.0',
          id: message.id,
          result: { content: [{ type: 'text', text: `done ${which}` }] },
        };
        const end = () => response.end(`event: message\ndata: ${JSON.stringify(rpc)}\n\n`);
        setTimeout(end, which === 1 ? 50 : 400);
      },
      undefined,
      2,
    );
    expect(results).toEqual([{ content: 'done 1' }, { content: 'done 2' }]);
  }, 10_000);

  it('the call carries its idempotency key (workflow, step and call) in _meta', async () => {
    const { calls } = await callThrough((message, response) => {
      replyResult(response, message.id, { content: [{ type: 'text', text: 'ok' }] });
    });
    expect(calls[0]?.params).toMatchObject({
      name: 'work',
      _meta: { 'waymark/idempotency-key': 'wf-1:turn-1:call_0' },
    });
  }, 10_000);
});
