import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';

let testApp: TestApp;
let adminKey: string;

beforeAll(async () => {
  testApp = await startTestApp({ RATE_LIMIT_MAX: '3', RATE_LIMIT_WINDOW_MS: '60000' });
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
});
afterAll(async () => testApp?.close());

describe('per-key rate limiting', () => {
  it('answers 429 problem+json with Retry-After once a key exceeds its limit, per key', async () => {
    const other = await testApp.services.tenancy.issueKey(
      (await testApp.services.tenancy.authenticate(adminKey))?.tenant.id ?? '',
      { name: 'other', scopes: ['member'] },
    );
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push(
        (await testApp.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(adminKey) }))
          .statusCode,
      );
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    const limited = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(adminKey),
    });
    expect(limited.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(limited.json().code).toBe('rate_limited');
    // The window, not the time left in it.
    expect(limited.json().detail).toMatch(
      /^Rate limit of 3 requests per 60 s exceeded; retry in \d+ s$/,
    );
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);

    const otherKey = await testApp.app.inject({
      method: 'GET',
      url: '/v1/me',
      headers: bearer(other.secret),
    });
    expect(otherKey.statusCode).toBe(200);
  });

  it('does not limit the health endpoints', async () => {
    for (let i = 0; i < 6; i++) {
      expect((await testApp.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    }
  });
});
