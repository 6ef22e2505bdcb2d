import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { operatorTenant } from '../support/event-streams.js';

/**
 * Every response to an allowed origin carries Access-Control-Allow-Origin
 * (README), the errors answered before any hook runs included: the
 * router's own refusals (frameworkErrors); shutting-down.test.ts has a
 * closing replica's 503.
 */

const ORIGIN = 'https://app.example.com';
let testApp: TestApp;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ CORS_ALLOWED_ORIGINS: ORIGIN });
  ({ key } = await operatorTenant(testApp));
});
afterAll(async () => testApp?.close());

describe('CORS on every error to an allowed origin', () => {
  it('a path that is not valid percent-encoding (400 invalid_url)', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/workflows/%zz',
      headers: { ...bearer(key), origin: ORIGIN },
    });
    expect(response.json().code).toBe('invalid_url');
    expect(response.headers['access-control-allow-origin']).toBe(ORIGIN);
  });

  it('a path parameter over 100 characters (414 path_parameter_too_long)', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${'a'.repeat(150)}`,
      headers: { ...bearer(key), origin: ORIGIN },
    });
    expect(response.json().code).toBe('path_parameter_too_long');
    expect(response.headers['access-control-allow-origin']).toBe(ORIGIN);
  });
});
