import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { lastApprovalRequest, pausedForApproval, turnRows } from '../../support/approvals.js';
import { type McpTestServer, startMcpTestServer } from '../../support/mcp-server.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolCallIdsOf,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import { getWorkflow, openWork, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * Human approval of tool calls in the tool loop, on both vendors' SDKs: an
 * HTTP tool (on the local tool server) or an MCP server registered with
 * `requiresApproval` pauses the workflow (awaiting_input, tool_approval)
 * before each call, after the turn's other calls ran; POST
 * /v1/workflows/:id/approve runs the call or declines it. The takeover
 * of an approved call cut off by a crash is in tool-approval-takeover.test.ts,
 * what approve refuses, a cancel and the expiry in tool-approval-pauses.test.ts.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);
let mcp: McpTestServer;

/**
 * Each test's approval tools (by test, letter and model), all registered
 * before anything runs: a tool registered between two workflows would
 * supersede the next one's early start (workflows/early-start.ts).
 */
const tools = new Map<string, { name: string; path: string }>();
function tool(key: string): { name: string; path: string } {
  const found = tools.get(key);
  if (!found) throw new Error(`no tool ${key}`);
  return found;
}
const MODELS = ['gpt', 'claude'];
const TOOL_KEYS = ['approve', 'deny', 'two-a', 'two-b', 'ask'];
beforeAll(async () => {
  mcp = await startMcpTestServer();
  await h.registerMcpServer('payments', mcp.url, { requiresApproval: true });
  for (const model of MODELS) {
    for (const key of TOOL_KEYS) {
      const path = `/slow/${key}-${model}`;
      tools.set(`${key}-${model}`, {
        name: await h.registerTool(path, { requiresApproval: true }),
        path,
      });
    }
  }
});
afterAll(async () => {
  await mcp?.close();
});

function callsAt(path: string) {
  return h.tools.calls.filter((call) => call.path === path);
}

describe.each(MODELS)('approving a tool call on %s', (model) => {
  it('the turn’s other calls run first; approved, the tool runs once with the Idempotency-Key it would have had, and its result goes to the model', async () => {
    const { name, path } = tool(`approve-${model}`);
    const { id, version, requestsBefore } = await pausedForApproval(
      h,
      model,
      callsTo(
        { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
        { id: 'call_pay', name, arguments: { city: 'Oslo' } },
      ),
      answer('Paid.'),
    );
    expect(callsAt(path)).toHaveLength(0);
    const before = await storedEvents(h.testApp, id);
    expect(
      before.filter((event) => event.type === 'tool_call').map((event) => event.detail.callId),
    ).toEqual(['call_sum', 'call_sum']);
    expect(await lastApprovalRequest(h, id)).toMatchObject({
      step: 'turn-1',
      status: 'paused',
      detail: { toolCallId: 'call_pay', tool: name, arguments: { city: 'Oslo' } },
    });

    const accepted = await act(
      id,
      'approve',
      { toolCallId: 'call_pay', approved: true },
      { 'if-match': `"${version}"` },
    );
    expect(accepted.statusCode, accepted.body).toBe(202);
    expect(accepted.json()).toMatchObject({ status: 'running', version: version + 1 });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Paid.' } });

    const received = callsAt(path);
    expect(received).toHaveLength(1);
    expect(received[0]?.headers['idempotency-key']).toBe(`${id}:turn-1:call_pay`);
    expect(JSON.parse(received[0]?.body ?? '')).toEqual({ city: 'Oslo' });
    const requests = h.provider.requests.slice(requestsBefore);
    expect(requests).toHaveLength(2);
    const results = toolResultsOf(requests[1]);
    expect(results.map((result) => result.callId)).toEqual(['call_sum', 'call_pay']);
    expect(results[1]?.content).toContain(path);

    const events = await storedEvents(h.testApp, id);
    expect(events.find((event) => event.type === 'tool_approval')).toMatchObject({
      step: 'turn-1',
      status: 'completed',
      detail: { toolCallId: 'call_pay', approved: true, reason: null },
    });
    expect(
      events
        .filter((event) => event.type === 'tool_call' && event.detail.callId === 'call_pay')
        .map((event) => [event.step, event.status]),
    ).toEqual([
      ['turn-1', 'started'],
      ['turn-1', 'completed'],
    ]);
    expect(openWork(events)).toEqual([]);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));

    const trace = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${id}/trace`,
      headers: bearer(h.tenant.key),
    });
    const waits = (trace.json().spans as { kind: string }[]).filter((span) => span.kind === 'wait');
    expect(waits).toMatchObject([
      {
        name: 'tool_approval',
        step: 'turn-1',
        status: 'completed',
        attributes: { tool: name, toolCallId: 'call_pay', approved: true },
      },
    ]);
  });

  it('declined, the tool never runs and the model is told the user declined it, with the reason', async () => {
    const { name, path } = tool(`deny-${model}`);
    const { id, requestsBefore } = await pausedForApproval(
      h,
      model,
      callsTo({ id: 'call_pay', name, arguments: { city: 'Oslo' } }),
      answer('I did not pay.'),
    );
    // Without toolCallId: the pending call.
    const accepted = await act(id, 'approve', { approved: false, reason: 'Too expensive' });
    expect(accepted.statusCode, accepted.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'I did not pay.' } });

    expect(callsAt(path)).toHaveLength(0);
    const requests = h.provider.requests.slice(requestsBefore);
    expect(requests).toHaveLength(2);
    // An error result: OpenAI's says so with `Error: ` before the text, Anthropic's with is_error.
    expect(toolResultsOf(requests[1])).toEqual([
      {
        callId: 'call_pay',
        content: `${model === 'gpt' ? 'Error: ' : ''}The user declined this call of ${name}; it did not run. The user's reason: Too expensive`,
      },
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(events.find((event) => event.type === 'tool_approval')?.detail).toEqual({
      toolCallId: 'call_pay',
      approved: false,
      reason: 'Too expensive',
    });
    expect(events.filter((event) => event.type === 'tool_call')).toMatchObject([
      { step: 'turn-1', status: 'failed', detail: { callId: 'call_pay', error: 'declined' } },
    ]);
  });

  it('two calls to approve in one turn pause twice, one call at a time; a decision naming another call is a 400; each call runs once', async () => {
    const a = tool(`two-a-${model}`);
    const b = tool(`two-b-${model}`);
    const { id, version, requestsBefore } = await pausedForApproval(
      h,
      model,
      callsTo(
        { id: 'call_a', name: a.name, arguments: { city: 'Oslo' } },
        { id: 'call_b', name: b.name, arguments: { city: 'Bergen' } },
      ),
      answer('Both done.'),
    );
    expect((await lastApprovalRequest(h, id))?.detail).toMatchObject({ toolCallId: 'call_a' });
    const wrong = await act(id, 'approve', { toolCallId: 'call_b', approved: true });
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json()).toMatchObject({
      code: 'tool_call_not_pending',
      errors: [{ field: 'body.toolCallId' }],
    });
    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'awaiting_input',
      version,
    });

    expect((await act(id, 'approve', { toolCallId: 'call_a', approved: true })).statusCode).toBe(
      202,
    );
    const second = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    expect(second).toMatchObject({ status: 'awaiting_input', awaitingReason: 'tool_approval' });
    expect((await lastApprovalRequest(h, id))?.detail).toMatchObject({
      toolCallId: 'call_b',
      tool: b.name,
      arguments: { city: 'Bergen' },
    });
    expect(callsAt(a.path)).toHaveLength(1);
    expect(callsAt(b.path)).toHaveLength(0);
    // No model call between the two pauses: the turn is not complete.
    expect(h.provider.requests.length - requestsBefore).toBe(1);
    // The decision on the first call again: no longer the pending one.
    const stale = await act(id, 'approve', { toolCallId: 'call_a', approved: true });
    expect(stale.statusCode).toBe(400);

    expect((await act(id, 'approve', { toolCallId: 'call_b', approved: true })).statusCode).toBe(
      202,
    );
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Both done.' } });
    // Each ran once: the first's result was persisted with the second pause, not run again.
    expect(callsAt(a.path)).toHaveLength(1);
    expect(callsAt(b.path)).toHaveLength(1);
    expect(callsAt(b.path)[0]?.headers['idempotency-key']).toBe(`${id}:turn-1:call_b`);
    const requests = h.provider.requests.slice(requestsBefore);
    expect(requests).toHaveLength(2);
    expect(toolCallIdsOf(requests[1] as NonNullable<(typeof requests)[1]>)).toEqual([
      'call_a',
      'call_b',
    ]);
    expect(toolResultsOf(requests[1]).map((result) => result.callId)).toEqual(['call_a', 'call_b']);
    const rows = await turnRows(h, id);
    expect(rows.map((row) => row.turn)).toEqual([1, 2]);
    expect(rows[0]?.state.awaiting).toBeNull();
    expect(rows[0]?.state.toolResults.map((result) => result.toolCallId)).toEqual([
      'call_a',
      'call_b',
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(
      events.filter((event) => event.type === 'tool_approval').map((event) => event.detail),
    ).toEqual([
      { toolCallId: 'call_a', approved: true, reason: null },
      { toolCallId: 'call_b', approved: true, reason: null },
    ]);
  });

  it('a turn with a question and a call to approve pauses for each, in the model’s order', async () => {
    const { name, path } = tool(`ask-${model}`);
    const { id, requestsBefore } = await pausedForApproval(
      h,
      model,
      callsTo(
        { id: 'call_pay', name, arguments: { city: 'Oslo' } },
        {
          id: 'call_q',
          name: 'ask_user',
          arguments: { question: 'Which card?', question_type: 'free_text' },
        },
      ),
      answer('Paid with the blue card.'),
    );
    expect((await act(id, 'approve', { approved: true })).statusCode).toBe(202);
    const asked = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    expect(asked).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
    expect((await act(id, 'answer', { answer: 'The blue one' })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({
      status: 'completed',
      result: { answer: 'Paid with the blue card.' },
    });
    expect(callsAt(path)).toHaveLength(1);
    const requests = h.provider.requests.slice(requestsBefore);
    expect(requests).toHaveLength(2);
    expect(toolResultsOf(requests[1])).toEqual([
      { callId: 'call_pay', content: expect.stringContaining(path) },
      { callId: 'call_q', content: 'The user answered: The blue one' },
    ]);
  });

  it('an MCP server registered with requiresApproval pauses before a call of any of its tools', async () => {
    const { id, requestsBefore } = await pausedForApproval(
      h,
      model,
      callsTo({ id: 'call_add', name: 'payments__add', arguments: { a: 2, b: 3 } }),
      answer('It is 5.'),
    );
    expect(await lastApprovalRequest(h, id)).toMatchObject({
      detail: { toolCallId: 'call_add', tool: 'payments__add', arguments: { a: 2, b: 3 } },
    });
    const callsBefore = mcp.rpcMethods.filter((method) => method === 'tools/call').length;
    expect((await act(id, 'approve', { approved: true })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'It is 5.' } });
    expect(mcp.rpcMethods.filter((method) => method === 'tools/call')).toHaveLength(
      callsBefore + 1,
    );
    const [result] = toolResultsOf(h.provider.requests.slice(requestsBefore)[1]);
    expect(result).toMatchObject({ callId: 'call_add', content: expect.stringContaining('5') });
  });
});
