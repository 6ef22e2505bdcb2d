import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../../support/app.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  startWorkflow,
  storedEvents,
  type TestTenant,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * With no provider key the offline scripted model runs the whole complex
 * path: it plans, answers the stages, pauses at its checkpoint and writes
 * the final answer, so `npm start` shows the pipeline without a key.
 */

let testApp: TestApp;
let tenant: TestTenant;
beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue(0), RATE_LIMIT_MAX: '100000' });
  tenant = await createTenant(testApp, await bootstrapOperator(testApp), { name: 'scripted' });
});
afterAll(async () => {
  await testApp?.close();
});

describe('the pipeline on the scripted model', () => {
  it('plans, pauses at the checkpoint, and completes after continue', async () => {
    const id = await startWorkflow(testApp, tenant.key, {
      input: 'Compare the prices of three laptops, then summarise them in a table',
    });
    const paused = await waitForStatus(
      testApp,
      tenant.key,
      id,
      ['awaiting_input', 'failed', 'completed'],
      30_000,
    );
    expect(paused).toMatchObject({
      status: 'awaiting_input',
      awaitingReason: 'checkpoint',
      kind: 'complex',
    });
    const continued = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/continue`,
      headers: bearer(tenant.key),
      payload: { version: paused.version },
    });
    expect(continued.statusCode, continued.body).toBe(202);
    const done = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed'], 30_000);
    expect(done.status, JSON.stringify(done.error)).toBe('completed');
    expect(String((done.result as { answer?: string } | null)?.answer)).toContain('scripted');
    const events = await storedEvents(testApp, id);
    expect(
      events.filter((event) => event.type === 'stage' && event.status === 'completed').length,
    ).toBeGreaterThan(1);
  });
});
