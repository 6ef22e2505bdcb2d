import { once } from 'node:events';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  operatorTenant,
  trackerOn,
} from '../support/event-streams.js';

/**
 * HEAD on a workflow's events URL (Fastify exposes it for every GET route)
 * answers at once with the head a GET would get: 200 and the stream's
 * headers for a workflow still running, with no stream behind it (no hub
 * subscription, no heartbeat), and the GET's 204 or 404 otherwise.
 */

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ SSE_HEARTBEAT_MS: '100' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

/**
 * Sends a raw HEAD (fetch would hide a head that never comes behind its
 * own timeout) and returns the response's head once it is whole.
 */
async function head(path: string): Promise<string> {
  const { port } = new URL(baseUrl);
  const socket = net.connect(Number(port), '127.0.0.1');
  try {
    await once(socket, 'connect');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
    });
    socket.write(
      `HEAD ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n\r\n`,
    );
    await eventually(() => received.includes('\r\n\r\n'), 2_000, 'the head of the response');
    return received;
  } finally {
    socket.destroy();
  }
}

describe('HEAD /v1/workflows/:id/events', () => {
  it('answers a running workflow at once with the stream’s headers, and holds no subscription', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    await trackerOn(testApp, { tenantId, workflowId }).begin();
    const answer = await head(`/v1/workflows/${workflowId}/events`);
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toMatch(/^content-type: text\/event-stream/im);
    expect(answer).toMatch(/^cache-control: no-cache, no-transform/im);
    expect(testApp.services.hub.subscriberCount(workflowId)).toBe(0);
  });

  it('answers as GET does when there is no stream: 204 after the last event, 404 for no workflow', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();
    await tracker.end({ status: 'completed', answer: 'done' });
    const { lastSeq } = await testApp.services.workflows.get(tenantId, workflowId);
    expect(await head(`/v1/workflows/${workflowId}/events?after=${lastSeq}`)).toMatch(
      /^HTTP\/1\.1 204 /,
    );
    expect(await head(`/v1/workflows/${crypto.randomUUID()}/events`)).toMatch(/^HTTP\/1\.1 404 /);
  });
});
