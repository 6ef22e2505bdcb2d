import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  operatorTenant,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * A workflow id is a uuid, which clients may write in capitals (Swift's
 * UUID().uuidString does): its events URL is the same workflow's, followed
 * live to its end, and a stream token opens it too.
 */

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ SSE_HEARTBEAT_MS: '60000' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

describe('an events URL with the workflow id in capitals', () => {
  it('is the same workflow: GET answers it, and its stream follows it live to its end', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const upper = workflowId.toUpperCase();

    const get = await fetch(`${baseUrl}/v1/workflows/${upper}`, { headers: bearer(key) });
    expect(get.status).toBe(200);
    expect(((await get.json()) as { id: string }).id).toBe(workflowId);

    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();

    const response = await fetch(`${baseUrl}/v1/workflows/${upper}/events`, {
      headers: { ...bearer(key), accept: 'text/event-stream' },
    });
    expect(response.status).toBe(200);
    let text = '';
    const finished = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of response.body ?? [])
        text += decoder.decode(chunk, { stream: true });
    })();
    // The stored event is replayed.
    await eventually(() => text.includes('id: 1\n'), 5_000, 'the stored event is replayed');

    // Live events.
    await tracker.emit('tool_call', 'search', 'completed');
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(finished, 5_000, 'the stream ends after workflow_end');
    const ids = [...text.matchAll(/^id: (\d+)$/gm)].map((match) => Number(match[1]));
    expect(ids).toEqual([1, 2, 3]);
  });

  it('a stream token opens the URL with the id in capitals', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const issued = await fetch(`${baseUrl}/v1/workflows/${workflowId}/stream-token`, {
      method: 'POST',
      headers: bearer(key),
    });
    expect(issued.status).toBe(200);
    const { token } = (await issued.json()) as { token: string };
    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();
    await tracker.end({ status: 'completed', answer: 'done' });
    const response = await fetch(
      `${baseUrl}/v1/workflows/${workflowId.toUpperCase()}/events?token=${token}`,
      { headers: { accept: 'text/event-stream' } },
    );
    expect(response.status, await response.clone().text()).toBe(200);
    expect(await response.text()).toContain('event: workflow_end');
  });
});
