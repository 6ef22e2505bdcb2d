import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_LISTED_TOOLS } from '../../src/tools/mcp-list-tools.js';
import { bearer } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
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
 * An MCP server whose tools/list never stops paging (each page one tool
 * and a next cursor) once `paging` is on: registration refuses it, and a
 * run leaves it out with a warning, rather than listing forever.
 */
let paging = false;
let pages = 0;
let mcp: RawMcpServer;

const h = useToolLoopHarness();

beforeAll(async () => {
  mcp = await startRawMcpServer((message, response) => {
    if (message.method === 'initialize')
      return replyResult(response, message.id, INITIALIZE_RESULT);
    if (message.id === undefined) return acceptNotification(response);
    pages += 1;
    const tools = [{ name: `t${pages}`, inputSchema: { type: 'object' } }];
    replyResult(response, message.id, paging ? { tools, nextCursor: `p${pages}` } : { tools });
  });
});
afterAll(() => mcp.close());

const register = (name: string) =>
  h.testApp.app.inject({
    method: 'POST',
    url: '/v1/mcp-servers',
    headers: bearer(h.tenant.key),
    payload: { name, url: mcp.url, timeoutMs: 30_000 },
  });

describe('an MCP server whose tools/list never stops paging', () => {
  it('POST /v1/mcp-servers answers 400 mcp_unreachable', async () => {
    paging = true;
    const refused = expectProblem(await register('pager_reg'), 400, 'mcp_unreachable');
    expect(String(refused.detail)).toContain(`it lists more than ${MAX_LISTED_TOOLS} tools`);
  });

  it('a workflow run leaves the server out with a warning, and completes', async () => {
    paging = false;
    expect((await register('pager')).statusCode).toBe(201);
    paging = true;
    h.provider.enqueue(answer('Hello.'));
    const { workflow, id } = await h.run('Say hello');
    expect(workflow.status).toBe('completed');
    const warnings = (await storedEvents(h.testApp, id)).filter(
      (event) => event.type === 'warning',
    );
    expect(warnings.map((event) => event.detail)).toEqual([
      expect.objectContaining({
        code: 'tool_source_unavailable',
        message: expect.stringContaining(`it lists more than ${MAX_LISTED_TOOLS} tools`),
      }),
    ]);
  });
});
