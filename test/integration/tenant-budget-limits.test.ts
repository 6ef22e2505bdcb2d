import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUDGET_LIMITS } from '../../src/workflows/budget.js';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  type TestTenant,
} from '../support/workflows.js';

/**
 * A cost cap is stored in numeric(14, 8) columns, which hold less than
 * 10^6: the largest cap the schemas accept is stored, and one above it is
 * a 400, never a 500 from the database.
 */

let testApp: TestApp;
let operatorKey: string;
let tenant: TestTenant;

beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue() });
  operatorKey = await bootstrapOperator(testApp);
  tenant = await createTenant(testApp, operatorKey, { name: 'acme' });
});
afterAll(async () => testApp?.close());

function patchCostCap(maxCostUsd: number) {
  return testApp.app.inject({
    method: 'PATCH',
    url: `/v1/tenants/${tenant.id}`,
    headers: bearer(operatorKey),
    payload: { budget: { maxCostUsd } },
  });
}

describe('a tenant cost cap at the top of its range', () => {
  it('the largest accepted cap is stored', async () => {
    const response = await patchCostCap(BUDGET_LIMITS.maxCostUsd);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().budget.maxCostUsd).toBe(BUDGET_LIMITS.maxCostUsd);
  });

  it.each([999_999.999_999_999, 1_000_000])(
    '%s, which would not fit the column once rounded, is a 400',
    async (maxCostUsd) => {
      const response = await patchCostCap(maxCostUsd);
      expect(response.statusCode, response.body).toBe(400);
      expect(response.json().code).toBe('validation_failed');
    },
  );

  it('a workflow asking for the largest cap runs with it', async () => {
    const created = await testApp.app.inject({
      method: 'POST',
      url: '/v1/workflows',
      headers: bearer(tenant.key),
      payload: { input: 'hi', budget: { maxCostUsd: BUDGET_LIMITS.maxCostUsd } },
    });
    expect(created.statusCode, created.body).toBe(202);
    const workflow = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${created.json().id}`,
      headers: bearer(tenant.key),
    });
    expect(workflow.json().budget.maxCostUsd).toBe(BUDGET_LIMITS.maxCostUsd);
  });
});
