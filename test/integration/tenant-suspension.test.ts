import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { completedStreamUrl } from '../support/event-streams.js';
import { expectProblem } from '../support/problems.js';
import { useTwoReplicas } from '../support/two-replicas.js';
import {
  countWorkflows,
  createTenant,
  startWorkflow,
  waitForStatus,
} from '../support/workflows.js';

/**
 * An operator suspends a tenant (`PATCH /v1/tenants/:id` with
 * `suspended`): its keys and stream tokens get 403 tenant_suspended until
 * the operator lifts it. Two replicas on one database, their key caches
 * kept for an hour: only the tenant change's notification can explain
 * replica B refusing a key it had cached.
 */

const r = useTwoReplicas();

describe('a suspended tenant', () => {
  it('gets 403 tenant_suspended for every key and stream token, on every replica, and nothing is written; lifted, all work again', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'to suspend' });
    const stream = await completedStreamUrl(r.a, tenant);
    // Both replicas know the key (replica B caches it for an hour).
    for (const replica of [r.a, r.b])
      expect((await r.me(replica, tenant.key)).statusCode).toBe(200);
    const workflows = await countWorkflows(r.a, tenant.id);

    const suspended = await r.patchTenant(tenant.id, { suspended: true });
    expect(suspended.statusCode, suspended.body).toBe(200);
    const since = suspended.json().suspendedAt as string;
    expect(Date.parse(since)).toBeGreaterThan(Date.now() - 60_000);

    await expect
      .poll(async () => (await r.me(r.b, tenant.key)).statusCode, { timeout: 5_000 })
      .toBe(403);
    for (const replica of [r.a, r.b]) {
      expectProblem(await r.me(replica, tenant.key), 403, 'tenant_suspended');
      const created = await replica.app.inject({
        method: 'POST',
        url: '/v1/workflows',
        headers: bearer(tenant.key),
        payload: { input: 'What is 6 * 7?' },
      });
      expectProblem(created, 403, 'tenant_suspended');
      expectProblem(
        await replica.app.inject({ method: 'GET', url: stream }),
        403,
        'tenant_suspended',
      );
    }
    expect(await countWorkflows(r.a, tenant.id)).toBe(workflows);

    // Suspending again keeps the time it began; a rename leaves it suspended.
    const again = await r.patchTenant(tenant.id, { suspended: true, name: 'still suspended' });
    expect(again.json()).toMatchObject({ name: 'still suspended', suspendedAt: since });
    const read = await r.a.app.inject({
      method: 'GET',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(r.operatorKey),
    });
    expect(read.json().suspendedAt).toBe(since);

    const lifted = await r.patchTenant(tenant.id, { suspended: false });
    expect(lifted.json().suspendedAt).toBeNull();
    await expect
      .poll(async () => (await r.me(r.b, tenant.key)).statusCode, { timeout: 5_000 })
      .toBe(200);
    expect((await r.me(r.a, tenant.key)).statusCode).toBe(200);
    expect((await r.a.app.inject({ method: 'GET', url: stream })).statusCode).toBe(204);
    const id = await startWorkflow(r.a, tenant.key, { input: 'What is 6 * 7?' });
    expect((await waitForStatus(r.a, tenant.key, id, ['completed', 'failed'])).status).toBe(
      'completed',
    );
  });

  it('other tenants are not affected', async () => {
    const suspended = await createTenant(r.a, r.operatorKey, { name: 'suspended one' });
    const other = await createTenant(r.a, r.operatorKey, { name: 'unaffected one' });
    expect((await r.patchTenant(suspended.id, { suspended: true })).statusCode).toBe(200);
    expect((await r.me(r.a, suspended.key)).statusCode).toBe(403);
    expect((await r.me(r.a, other.key)).statusCode).toBe(200);
    expect((await r.me(r.a, other.key)).json().tenant.suspendedAt).toBeNull();
  });

  it('the operator tenant cannot be suspended: 400 operator_not_suspendable, and it is not', async () => {
    const mine = (await r.me(r.a, r.operatorKey)).json().tenant as { id: string };
    const refused = await r.patchTenant(mine.id, { suspended: true });
    const body = expectProblem(refused, 400, 'operator_not_suspendable');
    expect(body.errors).toEqual([{ field: 'body.suspended', message: expect.any(String) }]);
    expect((await r.me(r.a, r.operatorKey)).json().tenant.suspendedAt).toBeNull();
  });

  it('only operator admins suspend: a tenant’s own admin key gets 403 operator_only', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'self suspender' });
    const response = await r.a.app.inject({
      method: 'PATCH',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(tenant.key),
      payload: { suspended: true },
    });
    expectProblem(response, 403, 'operator_only');
    expect((await r.me(r.a, tenant.key)).json().tenant.suspendedAt).toBeNull();
  });

  it('suspended must be a boolean: 400 validation_failed', async () => {
    const tenant = await createTenant(r.a, r.operatorKey, { name: 'validated suspension' });
    for (const suspended of ['yes', 1, null]) {
      const response = await r.patchTenant(tenant.id, { suspended });
      expectProblem(response, 400, 'validation_failed');
    }
  });
});
