import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import {
  answer,
  callsTo,
  offeredToolsOf,
  startToolLoopHarness,
  type ToolLoopHarness,
  toolResultsOf,
} from '../../support/tool-loop-harness.js';

/** MCP servers' tools offered in a workflow's tool loop, end to end. */

let h: ToolLoopHarness;
let mcp: McpTestServer;
beforeAll(async () => {
  h = await startToolLoopHarness();
  mcp = await startMcpTestServer({ stateful: true });
  await h.registerMcpServer('calc', mcp.url);
});
afterAll(async () => {
  await h?.close();
  await mcp?.close();
});

describe.each(['gpt', 'claude'])('MCP tools in the tool loop on %s', (model) => {
  it('the model sees the server’s tools, calls one, and its result comes back; the session is closed after the run', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calc__add', arguments: { a: 20, b: 22 } }),
      answer('It is 42.'),
    );
    const { workflow, events, requests } = await h.run('Add twenty and twenty-two', model);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
    expect(offeredToolsOf(requests[0])).toEqual(
      expect.arrayContaining(['calc__add', 'calc__lookup']),
    );
    const [result] = toolResultsOf(requests[1]);
    expect(result?.content).toContain('42');
    expect(
      events.filter((event) => event.type === 'tool_call').map((event) => event.status),
    ).toEqual(['started', 'completed']);
    await expect.poll(() => mcp.openSessions()).toBe(0);
  });
});

describe('MCP servers that cannot be reached', () => {
  it('a server that cannot be reached is a warning, not a failed workflow', async () => {
    const down = await startMcpTestServer();
    await h.registerMcpServer('gone', down.url);
    await down.close();
    h.provider.enqueue(answer('Fine without it.'));
    const { workflow, events } = await h.run('Hello there');
    expect(workflow).toMatchObject({ status: 'completed' });
    expect(events.find((event) => event.type === 'warning')?.detail).toMatchObject({
      code: 'tool_source_unavailable',
    });
  });
});
