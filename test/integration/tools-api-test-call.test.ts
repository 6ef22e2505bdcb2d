import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import { SECRET, tenantKeys, toolsApiHelpers } from '../support/tools-api.js';

/**
 * `POST /v1/tools/:id/test`: one call of an HTTP tool outside any
 * workflow, as the tool loop makes it, for the tool's author to check it.
 */

let testApp: TestApp;
let server: ToolServer;
let adminKey: string;
let memberKey: string;
let otherTenantKey: string;

beforeAll(async () => {
  server = await startToolServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  ({ adminKey, memberKey, otherTenantKey } = await tenantKeys(testApp));
});
afterAll(async () => {
  await testApp?.close();
  await server?.close();
});

const { toolBody, createTool } = toolsApiHelpers(() => ({ testApp, server, adminKey }));

async function registered(overrides: Record<string, unknown> = {}): Promise<string> {
  const response = await createTool(toolBody(overrides));
  expect(response.statusCode, response.body).toBe(201);
  return response.json().id as string;
}

function testCall(id: string, body: unknown, key = adminKey) {
  return testApp.app.inject({
    method: 'POST',
    url: `/v1/tools/${id}/test`,
    headers: bearer(key),
    payload: body as Record<string, unknown>,
  });
}

describe('a test call of an HTTP tool', () => {
  it('calls the tool as a workflow does and answers what the loop reads, secrets redacted', async () => {
    const id = await registered();
    // The server quotes the request's headers back, the secret among them.
    server.handle((call, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({ body: JSON.parse(call.body), auth: call.headers.authorization }),
      );
    });
    const before = server.calls.length;
    const response = await testCall(id, { arguments: { city: 'Paris' } });
    expect(response.statusCode, response.body).toBe(200);
    const result = response.json();
    expect(result).toMatchObject({ outcome: 'completed', isError: false });
    expect(result.content).toContain('"city":"Paris"');
    expect(result.content).not.toContain('very-secret-token');
    expect(result.content).toContain('[redacted]');
    expect(result.elapsedMs).toBeGreaterThanOrEqual(0);
    const calls = server.calls.slice(before);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.headers.authorization).toBe(SECRET);
    expect(String(calls[0]?.headers['idempotency-key'])).toMatch(new RegExp(`${result.callId}$`));
  });

  it('arguments that do not fit the parameters are 400 invalid_arguments, and the tool is not called', async () => {
    const id = await registered();
    const before = server.calls.length;
    for (const args of [{ city: 42 }, {}]) {
      const body = expectProblem(await testCall(id, { arguments: args }), 400, 'invalid_arguments');
      expect(body.errors).toEqual([{ field: 'body.arguments', message: expect.any(String) }]);
    }
    expectProblem(await testCall(id, { arguments: 'Paris' }), 400, 'validation_failed');
    expectProblem(await testCall(id, {}), 400, 'validation_failed');
    expect(server.calls.length).toBe(before);
  });

  it('a tool answering an error, or too slow, is a 200 whose result says so', async () => {
    const failing = await registered();
    server.handle((_call, response) => {
      response.writeHead(503, { 'content-type': 'text/plain' });
      response.end('down for maintenance');
    });
    const failed = (await testCall(failing, { arguments: { city: 'Oslo' } })).json();
    expect(failed).toMatchObject({ outcome: 'failed', isError: true });
    expect(failed.content).toContain('503');

    const slow = await registered({ timeoutMs: 200 });
    server.handle(() => {
      // Never answers: the call's timeout ends it.
    });
    const timedOut = (await testCall(slow, { arguments: { city: 'Oslo' } })).json();
    // The HTTP tool's own timeout answers first, as in a workflow.
    expect(timedOut).toMatchObject({ outcome: 'failed', isError: true });
    expect(timedOut.content).toContain('did not answer within 200 ms');
    expect(timedOut.elapsedMs).toBeGreaterThanOrEqual(150);
  });

  it('a client that goes away ends the call at once, not at the tool’s timeout', async () => {
    const hanging = await registered({ timeoutMs: 60_000 });
    let arrived: () => void = () => undefined;
    const called = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const closed = new Promise<number>((resolve) => {
      server.handle((_call, response) => {
        // Never answers: only the caller can end the request.
        const start = Date.now();
        response.once('close', () => resolve(Date.now() - start));
        arrived();
      });
    });
    const { url } = await listenLocally(testApp.app);
    const client = new AbortController();
    const request = fetch(`${url}/v1/tools/${hanging}/test`, {
      method: 'POST',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { city: 'Oslo' } }),
      signal: client.signal,
    }).catch((error: unknown) => error);
    await called;
    client.abort();
    expect(await request).toBeInstanceOf(Error);
    // The 60 s timeout would have ended it only then.
    expect(await closed).toBeLessThan(30_000);
  });

  it('needs the admin scope; another tenant’s tool answers 404 and is not called', async () => {
    const id = await registered();
    const before = server.calls.length;
    expectProblem(
      await testCall(id, { arguments: { city: 'Rome' } }, memberKey),
      403,
      'insufficient_scope',
    );
    expectProblem(
      await testCall(id, { arguments: { city: 'Rome' } }, otherTenantKey),
      404,
      'not_found',
    );
    expect(server.calls.length).toBe(before);
  });
});
