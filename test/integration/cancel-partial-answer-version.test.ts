import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  cancelWorkflow,
  createTenant,
  getWorkflow,
  postWorkflow,
  scriptedCatalogue,
  type TestTenant,
  waitFor,
} from '../support/workflows.js';

/**
 * Every change of a workflow bumps its version and updatedAt (README),
 * the partial answer a cancelled run keeps after the cancel's own change
 * included: a client that saw the cancel's version learns that `result`
 * changed.
 */

let testApp: TestApp;
let tenant: TestTenant;
beforeAll(async () => {
  testApp = await startTestApp({
    WAYMARK_MODELS: scriptedCatalogue(200),
    RATE_LIMIT_MAX: '100000',
  });
  tenant = await createTenant(testApp, await bootstrapOperator(testApp), { name: 'v' });
});
afterAll(async () => testApp?.close());

describe('cancel keeps the streamed text', () => {
  it('the change of result after a cancel bumps version and updatedAt', async () => {
    const response = await postWorkflow(testApp, tenant.key, { input: 'slowly', model: 'slow' });
    const id = response.json().id as string;
    let streamed = '';
    const unsubscribe = testApp.services.hub.subscribe(id, {
      onEvent: () => undefined,
      onTokens: (text) => {
        streamed += text;
      },
    });
    await waitFor(() => (streamed.length > 0 ? true : undefined), 'tokens');
    unsubscribe();
    const cancel = await cancelWorkflow(testApp, tenant.key, id);
    expect(cancel.statusCode).toBe(202);
    const atCancel = cancel.json();
    expect(atCancel.result).toBeNull();
    const later = await waitFor(async () => {
      const workflow = await getWorkflow(testApp, tenant.key, id);
      return workflow.result === null ? undefined : workflow;
    }, 'the partial answer kept');
    // result changed: the version (and updatedAt) must say so.
    expect(later.version).toBeGreaterThan(atCancel.version);
    expect(later.updatedAt).not.toBe(atCancel.updatedAt);
  });
});
