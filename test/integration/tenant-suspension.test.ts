import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { insertWorkflow } from '../support/event-streams.js';
import { expectProblem } from '../support/problems.js';
import {
  bootstrapOperator,
  countWorkflows,
  createTenant,
  scriptedCatalogue,
  startWorkflow,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

/**
 * An operator suspends a tenant (`PATCH /v1/tenants/:id` with
 * `suspended`): its keys and stream tokens get 403 tenant_suspended until
 * the operator lifts it. Two replicas on one database, their key caches
 * kept for an hour: only the tenant change's notification can explain
 * replica B refusing a key it had cached.
 */

let replicaA: TestApp;
let replicaB: TestApp;
let operatorKey: string;

beforeAll(async () => {
  const env = { WAYMARK_MODELS: scriptedCatalogue(), AUTH_CACHE_TTL_MS: '3600000' };
  replicaA = await startTestApp(env);
  replicaB = await startTestAppOn(replicaA.database, env);
  operatorKey = await bootstrapOperator(replicaA);
});
afterAll(async () => {
  await replicaB?.close();
  await replicaA?.close();
});

function me(replica: TestApp, key: string) {
  return replica.app.inject({ method: 'GET', url: '/v1/me', headers: bearer(key) });
}

function patchTenant(id: string, payload: Record<string, unknown>) {
  return replicaA.app.inject({
    method: 'PATCH',
    url: `/v1/tenants/${id}`,
    headers: bearer(operatorKey),
    payload,
  });
}

/** A stream token of the tenant for a workflow of its, and the URL it opens. */
async function streamUrl(tenant: TestTenant): Promise<string> {
  const workflowId = await insertWorkflow(replicaA, tenant.id, 'completed');
  const issued = await replicaA.app.inject({
    method: 'POST',
    url: `/v1/workflows/${workflowId}/stream-token`,
    headers: bearer(tenant.key),
  });
  expect(issued.statusCode, issued.body).toBe(200);
  return issued.json().url as string;
}

describe('a suspended tenant', () => {
  it('gets 403 tenant_suspended for every key and stream token, on every replica, and nothing is written; lifted, all work again', async () => {
    const tenant = await createTenant(replicaA, operatorKey, { name: 'to suspend' });
    const stream = await streamUrl(tenant);
    // Both replicas know the key (replica B caches it for an hour).
    for (const replica of [replicaA, replicaB])
      expect((await me(replica, tenant.key)).statusCode).toBe(200);
    const workflows = await countWorkflows(replicaA, tenant.id);

    const suspended = await patchTenant(tenant.id, { suspended: true });
    expect(suspended.statusCode, suspended.body).toBe(200);
    const since = suspended.json().suspendedAt as string;
    expect(Date.parse(since)).toBeGreaterThan(Date.now() - 60_000);

    await expect
      .poll(async () => (await me(replicaB, tenant.key)).statusCode, { timeout: 5_000 })
      .toBe(403);
    for (const replica of [replicaA, replicaB]) {
      expectProblem(await me(replica, tenant.key), 403, 'tenant_suspended');
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
    expect(await countWorkflows(replicaA, tenant.id)).toBe(workflows);

    // Suspending again keeps the time it began; a rename leaves it suspended.
    const again = await patchTenant(tenant.id, { suspended: true, name: 'still suspended' });
    expect(again.json()).toMatchObject({ name: 'still suspended', suspendedAt: since });
    const read = await replicaA.app.inject({
      method: 'GET',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(operatorKey),
    });
    expect(read.json().suspendedAt).toBe(since);

    const lifted = await patchTenant(tenant.id, { suspended: false });
    expect(lifted.json().suspendedAt).toBeNull();
    await expect
      .poll(async () => (await me(replicaB, tenant.key)).statusCode, { timeout: 5_000 })
      .toBe(200);
    expect((await me(replicaA, tenant.key)).statusCode).toBe(200);
    expect((await replicaA.app.inject({ method: 'GET', url: stream })).statusCode).toBe(204);
    const id = await startWorkflow(replicaA, tenant.key, { input: 'What is 6 * 7?' });
    expect((await waitForStatus(replicaA, tenant.key, id, ['completed', 'failed'])).status).toBe(
      'completed',
    );
  });

  it('other tenants are not affected', async () => {
    const suspended = await createTenant(replicaA, operatorKey, { name: 'suspended one' });
    const other = await createTenant(replicaA, operatorKey, { name: 'unaffected one' });
    expect((await patchTenant(suspended.id, { suspended: true })).statusCode).toBe(200);
    expect((await me(replicaA, suspended.key)).statusCode).toBe(403);
    expect((await me(replicaA, other.key)).statusCode).toBe(200);
    expect((await me(replicaA, other.key)).json().tenant.suspendedAt).toBeNull();
  });

  it('the operator tenant cannot be suspended: 400 operator_not_suspendable, and it is not', async () => {
    const mine = (await me(replicaA, operatorKey)).json().tenant as { id: string };
    const refused = await patchTenant(mine.id, { suspended: true });
    const body = expectProblem(refused, 400, 'operator_not_suspendable');
    expect(body.errors).toEqual([{ field: 'body.suspended', message: expect.any(String) }]);
    expect((await me(replicaA, operatorKey)).json().tenant.suspendedAt).toBeNull();
  });

  it('only operator admins suspend: a tenant’s own admin key gets 403 operator_only', async () => {
    const tenant = await createTenant(replicaA, operatorKey, { name: 'self suspender' });
    const response = await replicaA.app.inject({
      method: 'PATCH',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(tenant.key),
      payload: { suspended: true },
    });
    expectProblem(response, 403, 'operator_only');
    expect((await me(replicaA, tenant.key)).json().tenant.suspendedAt).toBeNull();
  });

  it('suspended must be a boolean: 400 validation_failed', async () => {
    const tenant = await createTenant(replicaA, operatorKey, { name: 'validated suspension' });
    for (const suspended of ['yes', 1, null]) {
      const response = await patchTenant(tenant.id, { suspended });
      expectProblem(response, 400, 'validation_failed');
    }
  });
});
