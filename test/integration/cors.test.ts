import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { closeTestApp, insertWorkflow, listen, operatorTenant } from '../support/event-streams.js';

/**
 * Browser pages on other origins (CORS_ALLOWED_ORIGINS): preflights, the
 * headers on every response to an allowed origin, event streams, and the
 * default, which sends no CORS headers at all.
 */

const APP_ORIGIN = 'https://app.example.com';
const DEV_ORIGIN = 'http://localhost:5173';

let cors: TestApp;
let plain: TestApp;
let key: string;
let tenantId: string;

beforeAll(async () => {
  cors = await startTestApp({ CORS_ALLOWED_ORIGINS: `${APP_ORIGIN}, ${DEV_ORIGIN}` });
  // Another replica over the same database, with the default: CORS off.
  plain = await startTestAppOn(cors.database);
  ({ tenantId, key } = await operatorTenant(cors));
});
afterAll(async () => {
  await plain?.close();
  if (cors) await closeTestApp(cors);
});

function preflight(app: TestApp, origin: string, url = '/v1/workflows') {
  return app.app.inject({
    method: 'OPTIONS',
    url,
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type, idempotency-key',
    },
  });
}

/** `GET /v1/me` from a page of `origin`, with the key or another secret. */
function me(app: TestApp, origin: string, secret = key) {
  return app.app.inject({
    method: 'GET',
    url: '/v1/me',
    headers: { ...bearer(secret), origin },
  });
}

describe('CORS', () => {
  it('answers a preflight from an allowed origin with 204 before authentication: methods, headers, max age', async () => {
    const response = await preflight(cors, DEV_ORIGIN);
    expect(response.statusCode, response.body).toBe(204);
    expect(response.headers['access-control-allow-origin']).toBe(DEV_ORIGIN);
    expect(response.headers['access-control-allow-methods']).toBe('GET, HEAD, POST, PATCH, DELETE');
    const allowed = String(response.headers['access-control-allow-headers']).split(', ');
    expect(allowed).toEqual(
      expect.arrayContaining(['Authorization', 'Content-Type', 'Idempotency-Key', 'If-Match']),
    );
    expect(response.headers['access-control-max-age']).toBe('600');
    expect(response.headers['access-control-allow-credentials']).toBeUndefined();
    expect(String(response.headers.vary)).toMatch(/origin/i);
  });

  it('marks every response to an allowed origin, errors included, and exposes the headers a page reads', async () => {
    const mine = await me(cors, APP_ORIGIN);
    expect(mine.statusCode).toBe(200);
    expect(mine.headers['access-control-allow-origin']).toBe(APP_ORIGIN);
    const exposed = String(mine.headers['access-control-expose-headers']).split(', ');
    expect(exposed).toEqual(
      expect.arrayContaining(['Location', 'Idempotent-Replayed', 'Retry-After', 'X-Request-Id']),
    );

    const refused = await me(cors, APP_ORIGIN, 'wmk_not-a-key');
    expect(refused.statusCode).toBe(401);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.headers['access-control-allow-origin']).toBe(APP_ORIGIN);
  });

  it('gives an origin that is not listed no CORS headers, on a preflight or a request', async () => {
    const other = 'https://evil.example.net';
    const answer = await preflight(cors, other);
    expect(answer.headers['access-control-allow-origin']).toBeUndefined();
    const mine = await me(cors, other);
    expect(mine.statusCode).toBe(200);
    expect(mine.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('sends the headers with an event stream, which a page opens with a stream token', async () => {
    const workflowId = await insertWorkflow(cors, tenantId);
    const issued = await cors.app.inject({
      method: 'POST',
      url: `/v1/workflows/${workflowId}/stream-token`,
      headers: { ...bearer(key), origin: APP_ORIGIN },
    });
    expect(issued.statusCode, issued.body).toBe(200);
    const baseUrl = await listen(cors);
    const headers = await new Promise<http.IncomingHttpHeaders>((resolve, reject) => {
      const request = http.get(
        `${baseUrl}${issued.json().url}`,
        { headers: { origin: APP_ORIGIN, accept: 'text/event-stream' } },
        (response) => {
          resolve(response.headers);
          request.destroy();
        },
      );
      request.once('error', reject);
    });
    expect(headers['content-type']).toMatch(/^text\/event-stream/);
    expect(headers['access-control-allow-origin']).toBe(APP_ORIGIN);
  });

  it('keeps a 404 for an unknown path (the preflight route is no method of it)', async () => {
    const response = await cors.app.inject({
      method: 'GET',
      url: '/v1/nothing-here',
      headers: { ...bearer(key), origin: APP_ORIGIN },
    });
    expect(response.statusCode).toBe(404);
    expect(response.json().code).toBe('route_not_found');
    expect(response.headers['access-control-allow-origin']).toBe(APP_ORIGIN);
  });

  it('is off by default: no CORS headers, and OPTIONS is a 405 problem like any other method the API lacks', async () => {
    const answer = await preflight(plain, APP_ORIGIN);
    expect(answer.statusCode).toBe(405);
    expect(answer.json().code).toBe('method_not_allowed');
    expect(answer.headers['access-control-allow-origin']).toBeUndefined();
    const mine = await me(plain, APP_ORIGIN);
    expect(mine.statusCode).toBe(200);
    expect(mine.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('allows any origin with *', async () => {
    const any = await startTestAppOn(cors.database, { CORS_ALLOWED_ORIGINS: '*' });
    try {
      const answer = await preflight(any, 'https://anywhere.example.org');
      expect(answer.statusCode).toBe(204);
      expect(answer.headers['access-control-allow-origin']).toBe('*');
    } finally {
      await any.close();
    }
  });
});
