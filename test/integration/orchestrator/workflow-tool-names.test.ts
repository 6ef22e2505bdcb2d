import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import { answer, offeredToolsOf, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { countWorkflows, createTenant, postWorkflow } from '../../support/workflows.js';

/**
 * The tool names a request gives in `tools`: checked against the tenant's
 * tools when the workflow is created, and what the run does with one whose
 * tool is gone by then.
 */

const h = useToolLoopHarness();
let mcp: McpTestServer;
beforeAll(async () => {
  mcp = await startMcpTestServer();
  await h.registerMcpServer('calc', mcp.url);
});
afterAll(async () => {
  await mcp?.close();
});

describe('the tools a workflow asks for', () => {
  it('names the tenant has no tool of answer 400 unknown_tool, naming them, and leave no row', async () => {
    const before = await countWorkflows(h.testApp, h.tenant.id);
    const response = await postWorkflow(h.testApp, h.tenant.key, {
      input: 'hi',
      tools: ['calculator', 'nope', 'calc', 'calc__', 'other__add'],
    });
    expect(response.statusCode, response.body).toBe(400);
    const problem = response.json();
    expect(problem).toMatchObject({ code: 'unknown_tool', status: 400 });
    expect(problem.errors).toEqual([
      { field: 'body.tools', message: expect.stringContaining('nope, calc, calc__, other__add;') },
    ]);
    expect(problem.detail).not.toContain('calculator');
    expect(await countWorkflows(h.testApp, h.tenant.id)).toBe(before);
  });

  it('built-ins, the tenant’s HTTP tools and tools under its MCP servers are accepted, and the model is offered those alone', async () => {
    const weather = await h.registerTool('/weather');
    h.provider.enqueue(answer('Nothing to do.'));
    const { workflow, requests } = await h.run('Hello', 'gpt', {
      tools: ['calculator', weather, 'calc__add'],
    });
    expect(workflow.status).toBe('completed');
    expect(offeredToolsOf(requests[0]).sort()).toEqual(['calc__add', 'calculator', weather].sort());
  });

  it('another tenant’s HTTP tool is unknown', async () => {
    const weather = await h.registerTool('/weather');
    const other = await createTenant(h.testApp, h.operatorKey, { name: 'other' });
    const response = await postWorkflow(h.testApp, other.key, { input: 'hi', tools: [weather] });
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('unknown_tool');
  });

  it('a tool registered through another replica is accepted here at once, though this replica remembers the tenant’s tools from before', async () => {
    // A run here reads the tenant's tools and this replica remembers them.
    h.provider.enqueue(answer('Noted.'));
    expect((await h.run('Remember my tools')).workflow.status).toBe('completed');
    const replica = await h.startReplica({});
    const name = `t_elsewhere_${Date.now()}`;
    const registered = await replica.app.inject({
      method: 'POST',
      url: '/v1/tools',
      headers: bearer(h.tenant.key),
      payload: {
        name,
        description: 'Registered on another replica',
        parameters: { type: 'object', properties: {} },
        url: `${h.tools.origin}/elsewhere`,
      },
    });
    expect(registered.statusCode, registered.body).toBe(201);
    h.provider.enqueue(answer('Fine.'));
    const { workflow, requests } = await h.run('Use the new tool', 'gpt', { tools: [name] });
    expect(workflow.status).toBe('completed');
    expect(offeredToolsOf(requests[0])).toEqual([name]);
  });

  it('a tool under an MCP server that the server does not list is a warning of the run, which goes on without it', async () => {
    h.provider.enqueue(answer('Done without it.'));
    const { workflow, events, requests } = await h.run('Try it', 'gpt', {
      tools: ['calculator', 'calc__missing'],
    });
    expect(workflow.status).toBe('completed');
    expect(offeredToolsOf(requests[0])).toEqual(['calculator']);
    expect(events.filter((event) => event.type === 'warning')).toEqual([
      expect.objectContaining({
        detail: {
          code: 'requested_tools_unavailable',
          message: expect.stringContaining('calc__missing'),
          tools: ['calc__missing'],
        },
      }),
    ]);
  });
});
