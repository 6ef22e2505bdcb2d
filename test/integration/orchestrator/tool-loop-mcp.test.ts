import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import {
  answer,
  callsTo,
  offeredToolsOf,
  startToolLoopHarness,
  type ToolLoopHarness,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';

/** MCP servers' tools offered in a workflow's tool loop, end to end. */

const h = useToolLoopHarness();
let mcp: McpTestServer;
beforeAll(async () => {
  mcp = await startMcpTestServer({ stateful: true });
  await h.registerMcpServer('calc', mcp.url);
});
afterAll(async () => {
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

describe('text from MCP tools', () => {
  it('a result cut mid-character by the server (a lone surrogate) reaches the model repaired, and the workflow completes', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calc__lookup', arguments: { key: 'cut' } }),
      answer('Done.'),
    );
    const { workflow, requests } = await h.run('Look up cut');
    // PostgreSQL refuses a lone surrogate in jsonb: the turn's write failed the workflow.
    expect(workflow.status).toBe('completed');
    expect(toolResultsOf(requests[1])[0]?.content).toContain('cut = smile \ufffd');
  });

  it('a result with a NUL character reaches the model with U+FFFD in its place, and the workflow completes', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calc__lookup', arguments: { key: 'nul' } }),
      answer('Done.'),
    );
    const { workflow, requests } = await h.run('Look up nul');
    expect(workflow.status).toBe('completed');
    expect(toolResultsOf(requests[1])[0]?.content).toContain('nul = a\ufffdb');
  });
});

describe('an MCP server listing a tool the protocol’s schema refuses', () => {
  it('registers, and its other tools are offered and callable; the refused one is left out', async () => {
    const partial = await startMcpTestServer({ brokenTool: true });
    try {
      // Before: 400 mcp_unreachable, the SDK refusing the whole list.
      await h.registerMcpServer('partial', partial.url);
      h.provider.enqueue(
        callsTo({ name: 'partial__add', arguments: { a: 1, b: 2 } }),
        answer('It is 3.'),
      );
      const { workflow, requests } = await h.run('Add one and two');
      expect(workflow.status).toBe('completed');
      const offered = offeredToolsOf(requests[0]);
      expect(offered).toContain('partial__add');
      expect(offered).not.toContain('partial__broken');
      expect(toolResultsOf(requests[1])[0]?.content).toContain('3');
    } finally {
      await partial.close();
    }
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

describe('MCP tools remembered across runs (MCP_TOOLS_CACHE_MS)', () => {
  // A run offers what an earlier listing found and connects to a server only to call one of its tools.
  let cached: ToolLoopHarness;
  let server: McpTestServer;
  beforeAll(async () => {
    cached = await startToolLoopHarness({ env: { MCP_TOOLS_CACHE_MS: '60000' } });
    server = await startMcpTestServer({ stateful: true });
    await cached.registerMcpServer('calc', server.url);
  });
  afterAll(async () => {
    await cached?.close();
    await server?.close();
  });

  it('a run that calls none of the server’s tools offers them without connecting to it', async () => {
    const before = server.rpcMethods.length;
    cached.provider.enqueue(answer('Nothing to add.'));
    const { workflow, requests } = await cached.run('Hello');
    expect(workflow.status).toBe('completed');
    expect(offeredToolsOf(requests[0])).toEqual(
      expect.arrayContaining(['calc__add', 'calc__lookup']),
    );
    expect(server.rpcMethods.slice(before)).toEqual([]);
  });

  it('a run connects when the model calls one of them, without listing them, and ends its session', async () => {
    const before = server.rpcMethods.length;
    cached.provider.enqueue(
      callsTo(
        { name: 'calc__add', arguments: { a: 20, b: 22 } },
        { name: 'calc__add', arguments: { a: 1, b: 2 } },
      ),
      answer('42 and 3.'),
    );
    const { workflow, requests } = await cached.run('Add twice');
    expect(workflow.status).toBe('completed');
    const [first, second] = toolResultsOf(requests[1]).map((result) => result.content);
    expect(first).toMatch(/\n42\n/);
    expect(second).toMatch(/\n3\n/);
    // One connection for both calls, made in parallel.
    expect(server.rpcMethods.slice(before)).toEqual([
      'initialize',
      'notifications/initialized',
      'tools/call',
      'tools/call',
    ]);
    await expect.poll(() => server.openSessions()).toBe(0);
  });

  it('a remembered server that is down fails the call with an error result naming it; the workflow goes on', async () => {
    const down = await startMcpTestServer();
    await cached.registerMcpServer('gone', down.url);
    await down.close();
    cached.provider.enqueue(
      callsTo({ name: 'gone__add', arguments: { a: 1, b: 1 } }),
      answer('It could not be added.'),
    );
    const { workflow, events, requests } = await cached.run('Add one and one');
    expect(workflow).toMatchObject({ status: 'completed' });
    expect(toolResultsOf(requests[1])[0]?.content).toMatch(
      /the gone MCP server could not be reached/,
    );
    expect(
      events.filter((event) => event.type === 'tool_call').map((event) => event.status),
    ).toEqual(['started', 'failed']);
  });
});
