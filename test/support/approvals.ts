import { expect } from 'vitest';
import type { FakeResponse } from '../fakes/provider-types.js';
import type { ToolLoopHarness } from './tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from './workflows.js';

/** Helpers for the tests of tool calls that require approval, on a tool-loop harness. */

/**
 * Starts a workflow on `model` whose model replies are `replies` (queued
 * now: the replies after the pause too), and waits for it to pause for an
 * approval.
 */
export async function pausedForApproval(
  h: ToolLoopHarness,
  model: string,
  ...replies: FakeResponse[]
): Promise<{ id: string; version: number; requestsBefore: number }> {
  const requestsBefore = h.provider.requests.length;
  h.provider.enqueue(...replies);
  const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Pay the bill', model });
  const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
    'awaiting_input',
    'completed',
    'failed',
  ]);
  expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'tool_approval' });
  return { id, version: paused.version, requestsBefore };
}

/** The workflow's latest `tool_approval_request` event. */
export async function lastApprovalRequest(h: ToolLoopHarness, id: string) {
  return (await storedEvents(h.testApp, id))
    .filter((event) => event.type === 'tool_approval_request')
    .at(-1);
}

/** The workflow's persisted turns, in order. */
export async function turnRows(h: ToolLoopHarness, id: string) {
  const { rows } = await h.testApp.services.database.pool.query<{
    turn: number;
    state: { awaiting: unknown; toolResults: { toolCallId: string }[] };
  }>('SELECT turn, state FROM workflow_turns WHERE workflow_id = $1 ORDER BY turn', [id]);
  return rows;
}
