import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { expectProblem } from '../support/problems.js';

let testApp: TestApp;
let adminKey: string;

beforeAll(async () => {
  testApp = await startTestApp({ BODY_LIMIT_BYTES: '4096' });
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
});
afterAll(async () => testApp?.close());

describe('bad input gets a 4xx problem+json, never a 500', () => {
  it('malformed JSON: 400 malformed_json', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      payload: '{"name": "ci",',
    });
    expectProblem(response, 400, 'malformed_json');
  });

  it('a wrong content type: 415 unsupported_media_type', async () => {
    for (const contentType of [
      'text/plain',
      'application/xml',
      'application/x-www-form-urlencoded',
    ]) {
      const response = await testApp.app.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: { ...bearer(adminKey), 'content-type': contentType },
        payload: 'name=ci',
      });
      expectProblem(response, 415, 'unsupported_media_type');
    }
  });

  it('an oversized body: 413 payload_too_large', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x'.repeat(10_000) }),
    });
    expectProblem(response, 413, 'payload_too_large');
  });

  it('an unknown route: 404 route_not_found', async () => {
    const response = await testApp.app.inject({ method: 'GET', url: '/v1/nothing-here' });
    expectProblem(response, 404, 'route_not_found');
  });

  it('a wrong method on a known route: 405 with Allow', async () => {
    const response = await testApp.app.inject({ method: 'PATCH', url: '/v1/api-keys' });
    expectProblem(response, 405, 'method_not_allowed');
    expect(response.headers.allow).toBe('GET, HEAD, POST');
    const withParam = await testApp.app.inject({
      method: 'POST',
      url: `/v1/api-keys/${crypto.randomUUID()}`,
    });
    expect(withParam.headers.allow).toBe('GET, HEAD, PATCH, DELETE');
  });

  it('a validation error lists every failing field', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(adminKey),
      payload: { name: '', scopes: ['root'], extra: true },
    });
    const body = expectProblem(response, 400, 'validation_failed');
    const fields = (body.errors as { field: string }[]).map((error) => error.field);
    expect(fields).toEqual(expect.arrayContaining(['body.name', 'body.scopes.0']));
  });

  it('a malformed path parameter is a 400, not a database error', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/api-keys/not-a-uuid',
      headers: bearer(adminKey),
    });
    const body = expectProblem(response, 400, 'validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'params.id' })]);
  });

  it('an empty JSON body: 400', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      payload: '',
    });
    expect(response.statusCode).toBe(400);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  });

  it('a batch of hostile bodies never produces a 500', async () => {
    const payloads = [
      'null',
      '[]',
      '"string"',
      '123',
      '{"name": null}',
      '{"name": {"$gt": ""}}',
      '{"name": "x", "scopes": "admin"}',
      '{"name": "x", "scopes": []}',
      `{"name": "${'\\u0000'.repeat(3)}"}`,
      '{"__proto__": {"admin": true}, "name": "x"}',
      '{"name": "x"'.padEnd(3000, ' '),
    ];
    for (const payload of payloads) {
      const response = await testApp.app.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: { ...bearer(adminKey), 'content-type': 'application/json' },
        payload,
      });
      expect(response.statusCode, payload).toBeGreaterThanOrEqual(200);
      expect(response.statusCode, payload).toBeLessThan(500);
    }
  });
});

describe('request ids', () => {
  it('every response carries one, and a sane incoming X-Request-Id is kept', async () => {
    const generated = await testApp.app.inject({ method: 'GET', url: '/healthz' });
    expect(generated.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    const kept = await testApp.app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'x-request-id': 'edge-1234' },
    });
    expect(kept.headers['x-request-id']).toBe('edge-1234');
    const replaced = await testApp.app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'x-request-id': 'bad id\nwith newline'.replace('\n', ' ') },
    });
    expect(replaced.headers['x-request-id']).not.toContain(' ');
  });
});

describe('health', () => {
  it('/healthz and /readyz answer 200 on a migrated database', async () => {
    expect((await testApp.app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({
      status: 'ok',
    });
    const ready = await testApp.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({
      status: 'ready',
      migrations: testApp.services.migrations.length,
    });
  });
});
