import { beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../support/app.js';
import { pausedExpiry } from '../support/paused-expiry.js';
import { callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { createTenant, startWorkflow, storedEvents, waitForStatus } from '../support/workflows.js';

/**
 * `POST /v1/tenants/:id/workflows/cancel` over real sockets: an operator
 * admin cancels a tenant's open workflows in pages (running first, then
 * queued, then paused), each as a client's cancel does, its run stopped;
 * another tenant's are left alone.
 */

const h = useToolLoopHarness();
const paused = pausedExpiry(() => h);
let base: string;

beforeAll(async () => {
  base = (await listenLocally(h.testApp.app)).url;
});

async function cancelOpen(
  tenantId: string,
  key: string,
  body?: Record<string, unknown>,
): Promise<Response> {
  return fetch(`${base}/v1/tenants/${tenantId}/workflows/cancel`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

describe('cancelling a tenant’s open workflows', () => {
  it('cancels them page by page, the running one first with its run stopped, and leaves another tenant’s', async () => {
    const first = await paused.pausedOnQuestion();
    const second = await paused.pausedOnQuestion();
    // Running: its first turn's tool call never answers.
    const hanging = await h.registerTool('/hang');
    h.provider.enqueue(callsTo({ name: hanging, arguments: {} }));
    const running = await startWorkflow(h.testApp, h.tenant.key, { input: 'Use the tool' });
    await waitForStatus(h.testApp, h.tenant.key, running, ['running']);
    await expect
      .poll(async () =>
        (await storedEvents(h.testApp, running)).some(
          (event) => event.type === 'tool_call' && event.status === 'started',
        ),
      )
      .toBe(true);
    // Another tenant's paused workflow.
    const other = await createTenant(h.testApp, h.operatorKey, { name: 'other' });
    h.provider.enqueue(
      callsTo({
        id: 'call_other',
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      }),
    );
    const others = await startWorkflow(h.testApp, other.key, { input: 'Weather?', mode: 'simple' });
    await waitForStatus(h.testApp, other.key, others, ['awaiting_input']);

    const page = await cancelOpen(h.tenant.id, h.operatorKey, { limit: 2 });
    expect(page.status).toBe(200);
    expect(await page.json()).toEqual({ cancelled: 2, more: true });
    // Running first: its run stopped, the hanging call given up.
    await waitForStatus(h.testApp, h.tenant.key, running, ['cancelled']);
    await expect.poll(() => h.timings.has('/hang')).toBe(true);
    const end = (await storedEvents(h.testApp, running)).at(-1);
    expect(end).toMatchObject({
      type: 'workflow_end',
      status: 'cancelled',
      detail: { reason: 'cancelled by the operator' },
    });

    // No body: the default limit takes the rest.
    const rest = await cancelOpen(h.tenant.id, h.operatorKey);
    expect(rest.status).toBe(200);
    expect(await rest.json()).toEqual({ cancelled: 1, more: false });
    for (const id of [first, second]) {
      await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    }
    await waitForStatus(h.testApp, other.key, others, ['awaiting_input']);

    const again = await cancelOpen(h.tenant.id, h.operatorKey, {});
    expect(await again.json()).toEqual({ cancelled: 0, more: false });
    await h.testApp.services.workflows.cancel(other.id, others);
  });

  it('is for operator admins: 403 for a tenant admin, 404 for no such tenant, 400 for a bad limit', async () => {
    const forTenant = await cancelOpen(h.tenant.id, h.tenant.key, {});
    expect(forTenant.status).toBe(403);
    expect(await forTenant.json()).toMatchObject({ code: 'operator_only' });
    const none = await cancelOpen('00000000-0000-4000-8000-000000000000', h.operatorKey, {});
    expect(none.status).toBe(404);
    for (const limit of [0, 501, 1.5, 'all']) {
      const bad = await cancelOpen(h.tenant.id, h.operatorKey, { limit });
      expect(bad.status, String(limit)).toBe(400);
      expect(await bad.json()).toMatchObject({ code: 'validation_failed' });
    }
  });
});
