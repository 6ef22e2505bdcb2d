import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import { answer, offeredToolsOf, useToolLoopHarness } from '../../support/tool-loop-harness.js';

/**
 * TOOLS_MAX_OFFERED: a workflow offers the model at most that many tools
 * (built-ins, then HTTP tools, then MCP tools); the rest are left out of
 * the run with a tools_over_limit warning, rather than every request
 * going to a model API that refuses so many. Set to 5 here: the 3
 * built-ins and 2 HTTP tools fill it, and the MCP server's tools are left out.
 */
const MAX = 5;
const BUILTINS = ['ask_user', 'calculator', 'current_time'];

const h = useToolLoopHarness({ env: { TOOLS_MAX_OFFERED: String(MAX) } });
let mcp: McpTestServer;
let httpTools: string[];
beforeAll(async () => {
  mcp = await startMcpTestServer();
  await h.registerMcpServer('calc', mcp.url);
  // The tenant's HTTP tools are offered in name order.
  httpTools = [await h.registerTool('/weather'), await h.registerTool('/news')].sort();
});
afterAll(async () => {
  await mcp?.close();
});

describe('the cap on the tools a workflow offers', () => {
  it.each(['gpt', 'claude'])(
    `%s: the first ${MAX} are offered, and one warning names the MCP tools left out`,
    async (model) => {
      h.provider.enqueue(answer('Fine.'));
      const { workflow, events, requests } = await h.run('Hello', model);
      expect(workflow.status).toBe('completed');
      expect(offeredToolsOf(requests[0])).toEqual([...BUILTINS, ...httpTools]);
      const warnings = events.filter((event) => event.type === 'warning');
      expect(warnings).toHaveLength(1);
      const detail = warnings[0]?.detail as { tools: string[]; leftOutCount: number };
      expect(detail).toMatchObject({ code: 'tools_over_limit', limit: MAX });
      expect(detail.tools.length).toBeGreaterThan(0);
      expect(detail.tools.every((name) => name.startsWith('calc__'))).toBe(true);
      expect(detail.leftOutCount).toBe(detail.tools.length);
    },
  );

  it('a request that names no more than the cap is offered all it names, without a warning', async () => {
    h.provider.enqueue(answer('Fine.'));
    const { workflow, events, requests } = await h.run('Hello', 'gpt', {
      tools: ['calculator', 'calc__add', 'calc__lookup'],
    });
    expect(workflow.status).toBe('completed');
    expect(offeredToolsOf(requests[0]).sort()).toEqual(['calc__add', 'calc__lookup', 'calculator']);
    expect(events.filter((event) => event.type === 'warning')).toEqual([]);
  });
});
