import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { listenLocally } from '../../support/app.js';
import { pausedForApproval } from '../../support/approvals.js';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  offeredToolsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import { callJson } from '../../support/tools-api.js';
import { postWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A change of an HTTP tool or an MCP server (PATCH, over real sockets) is
 * seen by the tenant's runs from their next start or resume: the write
 * bumps the tenant's endpoints_version, which a new workflow's insert
 * checks (workflows/early-start.ts), and a resumed run reads the tools
 * afresh. A list of an MCP server's tools that a replica remembers
 * (MCP_TOOLS_CACHE_MS) is not used once its URL or headers changed.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);
let base: string;
let mcp: McpTestServer;
let moved: McpTestServer;

const NEW_SECRET = 'Bearer rotated-token-0042';

beforeAll(async () => {
  base = (await listenLocally(h.testApp.app)).url;
  mcp = await startMcpTestServer();
  moved = await startMcpTestServer();
});
afterAll(async () => {
  // The listening socket's keep-alive connections would hold the app's close open.
  h.testApp?.app.server.closeAllConnections();
  await moved?.close();
  await mcp?.close();
});

async function patch(path: string, body: Record<string, unknown>) {
  const reply = await callJson(base, { key: h.tenant.key, method: 'PATCH', path, body });
  expect(reply.status, reply.text).toBe(200);
  return reply.json;
}

async function idOf(listing: '/v1/tools' | '/v1/mcp-servers', name: string): Promise<string> {
  const reply = await callJson(base, { key: h.tenant.key, method: 'GET', path: listing });
  return reply.json.items.find((item: { name: string }) => item.name === name).id;
}

/** The description a request offered a tool under, for either API. */
function offeredDescription(request: RecordedRequest | undefined, name: string) {
  const tools = (request?.body.tools ?? []) as {
    name?: string;
    description?: string;
    function?: { name: string; description?: string };
  }[];
  const offer = tools.find((tool) => (tool.function?.name ?? tool.name) === name);
  return offer?.function?.description ?? offer?.description;
}

describe('a run after a change', () => {
  it('an HTTP tool turned to requiresApproval: the tenant’s next workflow pauses before calling it', async () => {
    const path = '/slow/approval-later';
    const name = await h.registerTool(path);
    h.provider.enqueue(
      callsTo({ id: 'call_1', name, arguments: { city: 'Oslo' } }),
      answer('Done.'),
    );
    const before = await h.run('Use the tool');
    expect(before.workflow.status).toBe('completed');
    expect(h.tools.calls.filter((call) => call.path === path)).toHaveLength(1);

    await patch(`/v1/tools/${await idOf('/v1/tools', name)}`, { requiresApproval: true });
    const { id } = await pausedForApproval(
      h,
      'gpt',
      callsTo({ id: 'call_2', name, arguments: { city: 'Oslo' } }),
    );
    expect(h.tools.calls.filter((call) => call.path === path)).toHaveLength(1);
    // Cancelled: no reply is queued for after the pause.
    expect((await act(id, 'cancel')).statusCode).toBe(202);
  });

  it('a workflow paused for a question resumes with the tool as changed meanwhile: its description, headers and approval', async () => {
    const path = '/slow/changed-while-paused';
    const name = await h.registerTool(path, {
      headers: { Authorization: 'Bearer old-token-0001' },
    });
    const requestsBefore = h.provider.requests.length;
    h.provider.enqueue(
      callsTo({
        id: 'call_ask',
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      }),
      callsTo({ id: 'call_tool', name, arguments: { city: 'Oslo' } }),
      answer('Oslo it is.'),
    );
    const created = await postWorkflow(h.testApp, h.tenant.key, {
      input: 'Weather?',
      mode: 'simple',
    });
    expect(created.statusCode, created.body).toBe(202);
    const id: string = created.json().id;
    await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);
    expect(offeredDescription(h.provider.requests[requestsBefore], name)).toContain('A test tool');

    await patch(`/v1/tools/${await idOf('/v1/tools', name)}`, {
      description: 'The weather, freshly described',
      headers: { Authorization: NEW_SECRET },
      requiresApproval: true,
    });
    expect((await act(id, 'answer', { answer: 'Oslo' })).statusCode).toBe(202);
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'tool_approval' });
    expect(offeredDescription(h.provider.requests.at(-1), name)).toContain(
      'The weather, freshly described',
    );

    expect((await act(id, 'approve', { approved: true })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Oslo it is.' } });
    const calls = h.tools.calls.filter((call) => call.path === path);
    expect(calls.map((call) => call.headers.authorization)).toEqual([NEW_SECRET]);
  });

  it('an MCP server turned to requiresApproval: the next workflow pauses before calling its tool', async () => {
    await h.registerMcpServer('later', mcp.url);
    await patch(`/v1/mcp-servers/${await idOf('/v1/mcp-servers', 'later')}`, {
      requiresApproval: true,
    });
    const { id } = await pausedForApproval(
      h,
      'gpt',
      callsTo({ id: 'call_add', name: 'later__add', arguments: { a: 1, b: 2 } }),
    );
    const events = await storedEvents(h.testApp, id);
    expect(events.find((event) => event.type === 'tool_approval_request')).toMatchObject({
      detail: { tool: 'later__add' },
    });
    expect((await act(id, 'cancel')).statusCode).toBe(202);
  });

  it('a replica remembering an MCP server’s tools (MCP_TOOLS_CACHE_MS) lists them again once its URL changed', async () => {
    const replica = await h.startReplica({ MCP_TOOLS_CACHE_MS: '600000' });
    await h.registerMcpServer('movable', mcp.url);
    // An Idempotency-Key makes a workflow start after its insert: no early start to supersede.
    const runOnReplica = async (key: string) => {
      const requestsBefore = h.provider.requests.length;
      h.provider.enqueue(answer('Nothing to call.'));
      const created = await postWorkflow(
        replica,
        h.tenant.key,
        { input: 'Hello', mode: 'simple' },
        { 'idempotency-key': key },
      );
      expect(created.statusCode, created.body).toBe(202);
      const done = await waitForStatus(replica, h.tenant.key, created.json().id, [
        'completed',
        'failed',
      ]);
      expect(done.status).toBe('completed');
      return offeredToolsOf(h.provider.requests[requestsBefore]);
    };
    expect(await runOnReplica('first')).toContain('movable__add');
    // Remembered: the replica's next run lists nothing.
    const listed = () => mcp.rpcMethods.filter((method) => method === 'tools/list').length;
    const listings = listed();
    expect(await runOnReplica('second')).toContain('movable__add');
    expect(listed()).toBe(listings);

    await patch(`/v1/mcp-servers/${await idOf('/v1/mcp-servers', 'movable')}`, { url: moved.url });
    const movedListings = moved.rpcMethods.filter((method) => method === 'tools/list').length;
    expect(await runOnReplica('third')).toContain('movable__add');
    // The change listed once on the main app; the replica's run listed again, at the new URL.
    expect(moved.rpcMethods.filter((method) => method === 'tools/list').length).toBe(
      movedListings + 1,
    );
  });
});
