import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  createTenant,
  postWorkflow,
  scriptedCatalogue,
  waitForStatus,
} from '../support/workflows.js';

/**
 * A cancel by the workflow's id in capitals: the events it writes are
 * published under the lower-case id the streams follow, and the run is
 * found and stopped (uuid-case.test.ts has the rest).
 */

let testApp: TestApp;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp({
    WAYMARK_MODELS: scriptedCatalogue(1000),
    RATE_LIMIT_MAX: '100000',
  });
  operatorKey = await bootstrapOperator(testApp);
});
afterAll(async () => {
  testApp?.app.server.closeAllConnections();
  await testApp?.close();
});

describe('cancel by an id in capitals', () => {
  it('ends the workflow’s open event stream', async () => {
    const tenant = await createTenant(testApp, operatorKey, { name: 'canceller' });
    const created = await postWorkflow(testApp, tenant.key, {
      input: 'take your time',
      model: 'slow',
    });
    expect(created.statusCode).toBe(202);
    const id = created.json().id as string;
    await waitForStatus(testApp, tenant.key, id, ['running']);
    const stream = testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${id}/events`,
      headers: bearer(tenant.key),
    });
    await sleep(300);
    const cancelled = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id.toUpperCase()}/cancel`,
      headers: bearer(tenant.key),
    });
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    expect(cancelled.json().status).toBe('cancelled');
    const ended = await Promise.race([stream.then((r) => r.body), sleep(5000).then(() => null)]);
    expect(ended, 'the stream ends with workflow_end within 5 s of the cancel').not.toBeNull();
    expect(ended).toContain('event: workflow_end');
  });
});
