import { describe, expect, it, vi } from 'vitest';
import type { TurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import { workflowEventsRepository } from '../../../src/store/workflow-events.js';
import { pausedForApproval, turnRows } from '../../support/approvals.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolCallIdsOf,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  claimAs,
  DEAD_RUN,
  expireLease,
  handOver,
  openWork,
  orphanedWorkflow,
  runStopped,
  startWorkflow,
  storedEvents,
  takeOverToEnd,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * An approved tool call cut off before its result was persisted: the
 * decision is in the log (written with the transition that resumed the
 * workflow), so the run taking the workflow over runs the call again,
 * exactly once more and with the same Idempotency-Key, and every call of
 * the turn ends with one result in the conversation.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);

describe.each(['gpt', 'claude'])('a crash after an approval on %s', (model) => {
  it('the approved call, run but its result never persisted, runs once more with the same Idempotency-Key; no call is left without a result', async () => {
    const path = `/slow/takeover-${model}`;
    const tool = await h.registerTool(path, { requiresApproval: true });
    const callsAt = () => h.tools.calls.filter((call) => call.path === path);
    h.provider.enqueue(
      callsTo(
        { id: 'call_sum', name: 'calculator', arguments: { expression: '2 + 2' } },
        { id: 'call_pay', name: tool, arguments: { city: 'Oslo' } },
      ),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Pay the bill', model });
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ awaitingReason: 'tool_approval' });

    // The approved call reaches the tool server, and its runner stalls past its lease there.
    const held = h.holdNextCall(path);
    expect((await act(id, 'approve', { approved: true })).statusCode).toBe(202);
    await held.called;
    await expireLease(h.testApp, id);
    // Claimed by a runner that dies at once: nothing of it runs.
    await claimAs(h.testApp, id, DEAD_RUN);
    // The stalled run gets the tool's answer, but may no longer write it.
    held.release();
    await runStopped(h.testApp, id);
    expect(callsAt()).toHaveLength(1);
    expect((await turnRows(h, id))[0]?.state.toolResults.map((r) => r.toolCallId)).toEqual([
      'call_sum',
    ]);

    await expireLease(h.testApp, id);
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Paid after the takeover.'));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    expect(done).toMatchObject({
      status: 'completed',
      result: { answer: 'Paid after the takeover.' },
    });

    const received = callsAt();
    expect(received).toHaveLength(2);
    expect(received.map((call) => call.headers['idempotency-key'])).toEqual([
      `${id}:turn-1:call_pay`,
      `${id}:turn-1:call_pay`,
    ]);
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(1);
    expect(toolCallIdsOf(requests[0] as NonNullable<(typeof requests)[0]>)).toEqual([
      'call_sum',
      'call_pay',
    ]);
    expect(toolResultsOf(requests[0])).toEqual([
      { callId: 'call_sum', content: expect.stringContaining('4') },
      { callId: 'call_pay', content: expect.stringContaining(path) },
    ]);
    const rows = await turnRows(h, id);
    expect(rows.map((row) => row.turn)).toEqual([1, 2]);
    expect(rows[0]?.state.awaiting).toBeNull();
    expect(rows[0]?.state.toolResults.map((result) => result.toolCallId)).toEqual([
      'call_sum',
      'call_pay',
    ]);
    const events = await storedEvents(h.testApp, id);
    expect(openWork(events)).toEqual([]);
    expect(events.filter((event) => event.type === 'tool_approval')).toHaveLength(1);
    expect(events.filter((event) => event.type === 'resumed')).toHaveLength(1);
  });
});

describe('a workflow taken over between an approval and its run', () => {
  it('runs the approved call from the stored decision, then pauses for the next call of the turn', async () => {
    const first = '/slow/orphan-first';
    const second = '/slow/orphan-second';
    const [a, b] = [
      await h.registerTool(first, { requiresApproval: true }),
      await h.registerTool(second, { requiresApproval: true }),
    ];
    // Its runner paused at call_a, was approved, and died before running it.
    const db = h.testApp.services.database.db;
    const id = await orphanedWorkflow(h.testApp, h.tenant.id, 'Pay twice');
    const turn: TurnState = {
      schemaVersion: 1,
      turn: 1,
      model: 'gpt',
      assistant: {
        content: '',
        toolCalls: [
          { id: 'call_a', name: a, arguments: { city: 'Oslo' } },
          { id: 'call_b', name: b, arguments: { city: 'Bergen' } },
        ],
      },
      toolResults: [],
      awaiting: { toolCallId: 'call_a', toolName: a },
      finishReason: 'tool_calls',
    };
    await workflowEventsRepository(db).appendNotified({
      tenantId: h.tenant.id,
      workflowId: id,
      events: [
        {
          type: 'tool_approval_request',
          step: 'turn-1',
          status: 'paused',
          detail: { toolCallId: 'call_a', tool: a, arguments: { city: 'Oslo' } },
          elapsedMs: null,
        },
        {
          type: 'tool_approval',
          step: 'turn-1',
          status: 'completed',
          detail: { toolCallId: 'call_a', approved: true, reason: null },
          elapsedMs: null,
        },
      ],
      writes: [turnWrite(turn)],
      origin: DEAD_RUN,
    });

    expect((await h.testApp.services.reclaimer.sweepOnce()).map((w) => w.id)).toContain(id);
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ awaitingReason: 'tool_approval' });
    expect(h.tools.calls.filter((call) => call.path === first)).toHaveLength(1);
    const requests = (await storedEvents(h.testApp, id)).filter(
      (event) => event.type === 'tool_approval_request',
    );
    expect(requests.map((event) => event.detail.toolCallId)).toEqual(['call_a', 'call_b']);

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Paid once each.'));
    expect((await act(id, 'approve', { approved: false })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed' });
    expect(h.tools.calls.filter((call) => call.path === first)).toHaveLength(1);
    expect(h.tools.calls.filter((call) => call.path === second)).toHaveLength(0);
    expect(toolResultsOf(h.provider.requests[before])).toEqual([
      { callId: 'call_a', content: expect.stringContaining(first) },
      { callId: 'call_b', content: expect.stringContaining('declined') },
    ]);
  });
});

describe('a hand-over while an approved call runs', () => {
  it('gives the call its interrupted result, as any call, and the run taking over goes on without running it again', async () => {
    const hanging = await h.registerTool('/hang', { requiresApproval: true, timeoutMs: 60_000 });
    const hangs = () => h.tools.calls.filter((call) => call.path === '/hang').length;
    const hangsBefore = hangs();
    const { id } = await pausedForApproval(
      h,
      'gpt',
      callsTo({ id: 'call_hang', name: hanging, arguments: {} }),
    );
    expect((await act(id, 'approve', { approved: true })).statusCode).toBe(202);
    await vi.waitFor(() => expect(hangs()).toBe(hangsBefore + 1), { timeout: 10_000 });
    await handOver(h.testApp, id);

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('The tool did not finish.'));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    expect(done).toMatchObject({ result: { answer: 'The tool did not finish.' } });
    expect(hangs()).toBe(hangsBefore + 1);
    expect(toolResultsOf(h.provider.requests[before])).toEqual([
      { callId: 'call_hang', content: expect.stringContaining('interrupted before it finished') },
    ]);
    expect(openWork(await storedEvents(h.testApp, id))).toEqual([]);
  });
});
