import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import { type TestTenant, useScriptedApp } from '../support/workflows.js';

/** An API key issued with `expiresAt` stops working then (401 api_key_expired). */

const { app, newTenant } = useScriptedApp();

function issue(tenant: TestTenant, payload: Record<string, unknown>) {
  return app().app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: bearer(tenant.key),
    payload,
  });
}

function me(key: string) {
  return app().app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
}

describe('an API key with an expiry', () => {
  it('works until it expires, then answers 401 api_key_expired, though this replica cached it', async () => {
    const tenant = await newTenant('expiring-key');
    const expiresAt = new Date(Date.now() + 1500);
    const issued = await issue(tenant, { name: 'short-lived', expiresAt: expiresAt.toISOString() });
    expect(issued.statusCode, issued.body).toBe(201);
    expect(issued.json().expiresAt).toBe(expiresAt.toISOString());
    const key = issued.json().key as string;
    const before = await me(key);
    expect(before.statusCode).toBe(200);
    expect(before.json().apiKey.expiresAt).toBe(expiresAt.toISOString());
    await sleep(Math.max(0, expiresAt.getTime() - Date.now()) + 50);
    const after = expectProblem(await me(key), 401, 'api_key_expired');
    expect(after.detail).toContain(expiresAt.toISOString());
    // Listed with its expiry; the tenant's other keys go on working.
    const listed = await app().app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
    });
    const keys = listed.json().items as { id: string; expiresAt: string | null }[];
    expect(keys.find((each) => each.id === issued.json().id)?.expiresAt).toBe(
      expiresAt.toISOString(),
    );
    expect((await me(tenant.key)).statusCode).toBe(200);
  });

  it('without one, never expires; one in the past, or not a time, is refused and nothing is issued', async () => {
    const tenant = await newTenant('expiry-validation');
    const lasting = await issue(tenant, { name: 'lasting' });
    expect(lasting.json().expiresAt).toBeNull();
    const past = await issue(tenant, {
      name: 'already-expired',
      expiresAt: new Date(Date.now() - 1000).toISOString(),
    });
    const body = expectProblem(past, 400, 'invalid_expiry');
    expect(body.errors).toEqual([{ field: 'body.expiresAt', message: 'must be in the future' }]);
    expectProblem(
      await issue(tenant, { name: 'bad', expiresAt: 'tomorrow' }),
      400,
      'validation_failed',
    );
    const listed = await app().app.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
    });
    const names = (listed.json().items as { name: string }[]).map((each) => each.name);
    expect(names).not.toContain('already-expired');
    expect(names).not.toContain('bad');
  });

  it('an expired admin key does not count as the tenant’s last: its only working admin key cannot be revoked', async () => {
    const tenant = await newTenant('expired-admins');
    const expiring = await issue(tenant, {
      name: 'expiring admin',
      scopes: ['admin'],
      expiresAt: new Date(Date.now() + 300).toISOString(),
    });
    expect(expiring.statusCode).toBe(201);
    await sleep(400);
    const own = (await me(tenant.key)).json().apiKey.id as string;
    const revoke = await app().app.inject({
      method: 'DELETE',
      url: `/v1/api-keys/${own}`,
      headers: bearer(tenant.key),
    });
    expectProblem(revoke, 409, 'last_admin_key');
    expect((await me(tenant.key)).statusCode).toBe(200);
  });
});
