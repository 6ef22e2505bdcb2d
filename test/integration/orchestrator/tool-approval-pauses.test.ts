import { describe, expect, it, vi } from 'vitest';
import { bearer } from '../../support/app.js';
import { pausedForApproval } from '../../support/approvals.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { getWorkflow, startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * A workflow waiting for a tool call's approval (tool-approval.test.ts):
 * what `approve` refuses, and the ends it shares with every pause, a
 * cancel and the expiry of PAUSED_WORKFLOW_EXPIRY_DAYS.
 */

const h = useToolLoopHarness({ env: { PAUSED_WORKFLOW_EXPIRY_DAYS: '7' } });
const { act } = pipelineRequests(() => h);

describe('approve’s conflicts, cancel and expiry', () => {
  it('approving a workflow that does not wait for an approval is a 409; so is a stale version', async () => {
    h.provider.enqueue(answer('Hello.'));
    const finished = await startWorkflow(h.testApp, h.tenant.key, { input: 'Say hello' });
    await waitForStatus(h.testApp, h.tenant.key, finished, ['completed']);
    const refused = await act(finished, 'approve', { approved: true });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({
      code: 'not_awaiting_input',
      current: { status: 'completed', awaitingReason: null },
    });

    const name = await h.registerTool('/slow/conflicts', { requiresApproval: true });
    const { id, version } = await pausedForApproval(
      h,
      'gpt',
      callsTo({ id: 'call_pay', name, arguments: {} }),
    );
    const stale = await act(id, 'approve', { approved: true, version: version - 1 });
    expect(stale.statusCode).toBe(409);
    expect(stale.json()).toMatchObject({
      code: 'stale_version',
      current: { status: 'awaiting_input', awaitingReason: 'tool_approval', version },
    });
    // An answer is not an approval.
    const answered = await act(id, 'answer', { answer: 'yes' });
    expect(answered.statusCode).toBe(409);
    expect(answered.json()).toMatchObject({ code: 'not_awaiting_input' });

    const cancelled = await act(id, 'cancel');
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'cancelled',
    });
    const late = await act(id, 'approve', { approved: true });
    expect(late.json()).toMatchObject({ code: 'not_awaiting_input' });
    const trace = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${id}/trace`,
      headers: bearer(h.tenant.key),
    });
    expect(
      (trace.json().spans as { kind: string }[]).filter((span) => span.kind === 'wait'),
    ).toMatchObject([{ name: 'tool_approval', status: 'cancelled' }]);
  });

  it('a call left unapproved past PAUSED_WORKFLOW_EXPIRY_DAYS ends the workflow cancelled with input_expired; the pause is counted by reason', async () => {
    const path = '/slow/expiry';
    const name = await h.registerTool(path, { requiresApproval: true });
    const metric = async () => {
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: '/metrics',
        headers: bearer(h.operatorKey),
      });
      const match = /^waymark_workflow_pauses_total\{reason="tool_approval"\} (\d+)$/m.exec(
        response.body,
      );
      return Number(match?.[1] ?? 0);
    };
    const pausesBefore = await metric();
    const { id } = await pausedForApproval(
      h,
      'claude',
      callsTo({ id: 'call_pay', name, arguments: {} }),
    );
    // Counted as the pause's event reaches this replica's event hub, just after the row changed.
    await vi.waitFor(async () => expect(await metric()).toBe(pausesBefore + 1));
    await h.testApp.services.database.pool.query(
      `UPDATE workflows SET paused_at = now() - interval '8 days' WHERE id = $1`,
      [id],
    );
    const swept = await h.testApp.services.retention.sweepOnce();
    expect(swept.expired).toBeGreaterThanOrEqual(1);
    expect(await getWorkflow(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'cancelled',
      error: { code: 'input_expired' },
    });
    expect(h.tools.calls.filter((call) => call.path === path)).toHaveLength(0);
  });
});
