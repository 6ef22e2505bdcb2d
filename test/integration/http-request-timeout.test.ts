import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { insertWorkflow, within } from '../support/event-streams.js';
import { connectRaw } from '../support/raw-http.js';

/**
 * A client that sends its request slowly, or stops halfway (slowloris, a
 * stalled upload), gets 408 request_timeout once REQUEST_TIMEOUT_MS has
 * passed, and its connection is closed: Fastify's default is no limit, so
 * such a connection was held for good. The limit is on receiving the
 * request only: an event stream, whose request has long arrived, stays
 * open past it.
 */

const TIMEOUT_MS = 1000;

let testApp: TestApp;
let adminKey: string;
let tenantId: string;
let port: number;

beforeAll(async () => {
  testApp = await startTestApp({ REQUEST_TIMEOUT_MS: String(TIMEOUT_MS), SSE_HEARTBEAT_MS: '200' });
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
  tenantId = created.tenant.id;
  ({ port } = await listenLocally(testApp.app));
});
afterAll(async () => testApp?.close());

function expectTimeoutProblem(answer: string) {
  const [head = '', body = ''] = answer.split('\r\n\r\n');
  expect(head.split(' ')[1]).toBe('408');
  expect(head.toLowerCase()).toContain('content-type: application/problem+json');
  expect(JSON.parse(body)).toMatchObject({ status: 408, code: 'request_timeout' });
}

describe('a request that does not arrive in time', () => {
  it('a body that stops halfway: 408 request_timeout, and the connection is closed', async () => {
    const connection = await connectRaw(port);
    connection.socket.write(
      `POST /v1/workflows HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"input":',
    );
    // Bounded only so that a server that never answers fails the test rather than hangs it.
    await within(connection.closed, 20_000, 'the server to close the stalled request');
    expectTimeoutProblem(connection.received());
  }, 30_000);

  it('headers sent a few bytes at a time, never finished: 408 request_timeout', async () => {
    const connection = await connectRaw(port);
    let stop = false;
    void (async () => {
      for (const piece of 'GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa') {
        if (stop || connection.socket.destroyed) return;
        connection.socket.write(piece);
        await sleep(100);
      }
    })();
    try {
      await within(connection.closed, 20_000, 'the server to close the trickling request');
    } finally {
      stop = true;
    }
    expectTimeoutProblem(connection.received());
  }, 30_000);

  it('an event stream stays open past the timeout, its heartbeats still coming', async () => {
    const id = await insertWorkflow(testApp, tenantId);
    const connection = await connectRaw(port);
    connection.socket.write(
      `GET /v1/workflows/${id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\n` +
        'Accept: text/event-stream\r\n\r\n',
    );
    await sleep(TIMEOUT_MS * 3);
    const before = connection.received().length;
    await sleep(600);
    expect(connection.socket.destroyed).toBe(false);
    expect(connection.received()).toMatch(/^HTTP\/1\.1 200/);
    // Heartbeats written after three timeouts have passed.
    expect(connection.received().length).toBeGreaterThan(before);
    connection.socket.destroy();
  }, 30_000);
});
