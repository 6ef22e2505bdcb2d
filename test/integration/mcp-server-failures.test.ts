import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  type RawMcpServer,
  replyResult,
  startRawMcpServer,
} from '../support/raw-mcp-server.js';
import { answer, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { storedEvents } from '../support/workflows.js';

/**
 * A hostile MCP server: well-behaved while `mode` is 'normal' (so it can
 * be registered), then answering initialize with an HTTP 500 whose body
 * has a NUL character ('nul500') or is 3 MB long ('big500').
 */
let mode: 'normal' | 'nul500' | 'big500' = 'normal';
let mcp: RawMcpServer;

const h = useToolLoopHarness();

beforeAll(async () => {
  mcp = await startRawMcpServer((message, response) => {
    if (message.method === 'initialize' && mode === 'nul500') {
      return void response
        .writeHead(500, { 'content-type': 'text/plain' })
        .end('broken\u0000server');
    }
    if (message.method === 'initialize' && mode === 'big500') {
      return void response
        .writeHead(500, { 'content-type': 'text/plain' })
        .end('x'.repeat(3_000_000));
    }
    if (message.method === 'initialize')
      return replyResult(response, message.id, INITIALIZE_RESULT);
    if (message.id === undefined) return acceptNotification(response);
    replyResult(response, message.id, {
      tools: [{ name: 'noop', inputSchema: { type: 'object' } }],
    });
  });
});
afterAll(() => mcp.close());

describe('an MCP server that answers initialize with an HTTP 500 (registered while it worked)', () => {
  beforeAll(async () => {
    mode = 'normal';
    const registered = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(h.tenant.key),
      payload: { name: 'flaky', url: mcp.url, timeoutMs: 2000 },
    });
    expect(registered.statusCode, registered.body).toBe(201);
  });

  it('whose body has a NUL character: the run completes with a tool_source_unavailable warning', async () => {
    mode = 'nul500';
    h.provider.enqueue(answer('Fine without it.'));
    const { workflow, events } = await h.run('Hello there');
    expect(workflow.status, JSON.stringify(workflow.error ?? workflow)).toBe('completed');
    expect(events.find((event) => event.type === 'warning')?.detail).toMatchObject({
      code: 'tool_source_unavailable',
    });
  }, 20_000);

  it('whose body is 3 MB: the warning stored with every run quotes a bounded excerpt, not the whole body', async () => {
    mode = 'big500';
    h.provider.enqueue(answer('Fine without it.'));
    const { workflow, id } = await h.run('Hello there');
    expect(workflow.status).toBe('completed');
    const warning = (await storedEvents(h.testApp, id)).find((event) => event.type === 'warning');
    expect(String(warning?.detail.message).length).toBeLessThan(10_000);
  }, 20_000);
});
