import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import {
  startWorkflow,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/**
 * `GET /v1/usage` and `GET /v1/tenants/:id/usage`: the usage ledger
 * (`llm_calls`) added up over a time range. Most tests write ledger rows of
 * their own times straight into the table; the first reads what a real
 * workflow's calls wrote.
 */

const { app, newTenant, operatorKey } = useScriptedApp();

interface LedgerRow {
  at: string;
  model?: string;
  provider?: string;
  outcome?: string;
  input?: number;
  output?: number;
  cached?: number;
  cacheWrite?: number;
  cost?: number;
}

async function writeLedger(tenantId: string, rows: LedgerRow[]): Promise<void> {
  for (const row of rows) {
    await app().services.database.pool.query(
      `INSERT INTO llm_calls (tenant_id, workflow_id, provider, model, model_id, attempt,
         input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd,
         latency_ms, outcome, started_at)
       VALUES ($1, $2, $3, $4, $4, 1, $5, $6, $7, $8, $9, 100, $10, $11)`,
      [
        tenantId,
        randomUUID(),
        row.provider ?? 'oai',
        row.model ?? 'gpt',
        row.input ?? 100,
        row.output ?? 10,
        row.cached ?? 0,
        row.cacheWrite ?? 0,
        row.cost ?? 0.5,
        row.outcome ?? 'ok',
        row.at,
      ],
    );
  }
}

function usage(key: string, query: string, path = '/v1/usage') {
  return app().app.inject({ method: 'GET', url: `${path}?${query}`, headers: bearer(key) });
}

const NOVEMBER = 'from=2026-11-01T00:00:00Z&to=2026-11-03T00:00:00Z';

/** Three rows in November's first two days, one after them, and another tenant's in between. */
async function novemberTenant(): Promise<TestTenant> {
  const tenant = await newTenant(`usage-${randomUUID().slice(0, 8)}`);
  const other = await newTenant(`usage-other-${randomUUID().slice(0, 8)}`);
  await writeLedger(tenant.id, [
    { at: '2026-11-01T10:00:00Z', input: 1000, output: 200, cached: 300, cost: 0.5 },
    {
      at: '2026-11-01T23:59:59.999Z',
      model: 'claude',
      provider: 'ant',
      outcome: 'timeout',
      input: 500,
      output: 0,
      cacheWrite: 50,
      cost: 0.25,
    },
    { at: '2026-11-02T00:00:00Z', input: 2000, output: 100, cost: 1 },
    { at: '2026-11-03T00:00:00Z', input: 7, output: 7, cost: 7 },
  ]);
  await writeLedger(other.id, [{ at: '2026-11-01T12:00:00Z', cost: 99 }]);
  return tenant;
}

const NOVEMBER_TOTALS = {
  calls: 3,
  failedCalls: 1,
  inputTokens: 3500,
  outputTokens: 300,
  cachedInputTokens: 300,
  cacheWriteTokens: 50,
  costUsd: 1.75,
};

describe('a tenant’s usage over a time range', () => {
  it('adds up what a workflow’s model calls wrote to the ledger', async () => {
    const tenant = await newTenant('usage-of-a-run');
    const id = await startWorkflow(app(), tenant.key, { input: 'What is 6 * 7?' });
    const done = await waitForStatus(app(), tenant.key, id, ['completed', 'failed']);
    expect(done.status).toBe('completed');
    const spent = done.usage as { inputTokens: number; outputTokens: number };
    // The ledger writes a run's last rows in batches, about every 250 ms.
    await expect
      .poll(async () => (await usage(tenant.key, '')).json().totals.calls, { timeout: 5_000 })
      .toBe(2);
    const report = (await usage(tenant.key, 'groupBy=model')).json();
    expect(report.totals).toMatchObject({
      calls: 2,
      failedCalls: 0,
      inputTokens: spent.inputTokens,
      outputTokens: spent.outputTokens,
    });
    expect(report.groups).toEqual([{ key: 'scripted', ...report.totals }]);
  });

  it('counts calls that started from `from` up to, not at, `to`, the tenant’s own only', async () => {
    const tenant = await novemberTenant();
    const response = await usage(tenant.key, NOVEMBER);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({
      from: '2026-11-01T00:00:00.000Z',
      to: '2026-11-03T00:00:00.000Z',
      groupBy: null,
      totals: NOVEMBER_TOTALS,
      groups: [],
    });
    // An offset names the same instant; the row at `to` is left out.
    const firstDay = (
      await usage(tenant.key, 'from=2026-11-01T01:00:00%2B01:00&to=2026-11-02T00:00:00Z')
    ).json();
    expect(firstDay.from).toBe('2026-11-01T00:00:00.000Z');
    expect(firstDay.totals).toMatchObject({ calls: 2, costUsd: 0.75 });
  });

  it('groups by UTC day, model or provider, in key order, adding up to the totals', async () => {
    const tenant = await novemberTenant();
    const grouped = async (by: string) => {
      const report = (await usage(tenant.key, `${NOVEMBER}&groupBy=${by}`)).json();
      expect(report.totals).toEqual(NOVEMBER_TOTALS);
      return report.groups.map((group: { key: string; calls: number; costUsd: number }) => [
        group.key,
        group.calls,
        group.costUsd,
      ]);
    };
    expect(await grouped('day')).toEqual([
      ['2026-11-01', 2, 0.75],
      ['2026-11-02', 1, 1],
    ]);
    expect(await grouped('model')).toEqual([
      ['claude', 1, 0.25],
      ['gpt', 2, 1.5],
    ]);
    expect(await grouped('provider')).toEqual([
      ['ant', 1, 0.25],
      ['oai', 2, 1.5],
    ]);
  });

  it('without a range, covers the 30 days up to now; an empty range has zero totals and no groups', async () => {
    const tenant = await newTenant('usage-default-range');
    const daysAgo = (days: number) => new Date(Date.now() - days * 86_400_000).toISOString();
    await writeLedger(tenant.id, [
      { at: daysAgo(1), cost: 1 },
      { at: daysAgo(29), cost: 2 },
      { at: daysAgo(31), cost: 4 },
    ]);
    expect((await usage(tenant.key, '')).json().totals).toMatchObject({ calls: 2, costUsd: 3 });
    const empty = (await usage(tenant.key, `${NOVEMBER}&groupBy=day`)).json();
    expect(empty.totals).toEqual({
      calls: 0,
      failedCalls: 0,
      inputTokens: 0,
      outputTokens: 0,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      costUsd: 0,
    });
    expect(empty.groups).toEqual([]);
  });

  it('an operator admin reads any tenant’s; a tenant’s admin not another’s, a member key not even its own', async () => {
    const tenant = await novemberTenant();
    const operator = operatorKey();
    const read = await usage(operator, NOVEMBER, `/v1/tenants/${tenant.id}/usage`);
    expect(read.statusCode, read.body).toBe(200);
    expect(read.json().totals).toEqual(NOVEMBER_TOTALS);
    expectProblem(
      await usage(operator, NOVEMBER, `/v1/tenants/${randomUUID()}/usage`),
      404,
      'not_found',
    );
    expectProblem(
      await usage(tenant.key, NOVEMBER, `/v1/tenants/${tenant.id}/usage`),
      403,
      'operator_only',
    );
    const member = await app().app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(tenant.key),
      payload: { name: 'member', scopes: ['member'] },
    });
    expect(member.statusCode, member.body).toBe(201);
    expectProblem(await usage(member.json().key, NOVEMBER), 403, 'insufficient_scope');
  });

  it('refuses a range that is empty, backwards or longer than 366 days (invalid_time_range), and malformed queries (validation_failed)', async () => {
    const tenant = await newTenant('usage-validation');
    for (const query of [
      'from=2026-11-02T00:00:00Z&to=2026-11-02T00:00:00Z',
      'from=2026-11-03T00:00:00Z&to=2026-11-02T00:00:00Z',
      'from=2025-01-01T00:00:00Z&to=2026-01-02T00:00:01Z',
    ]) {
      const body = expectProblem(await usage(tenant.key, query), 400, 'invalid_time_range');
      expect(body.errors, query).toEqual([{ field: 'query.from', message: expect.any(String) }]);
    }
    expect(
      (await usage(tenant.key, 'from=2025-01-01T00:00:00Z&to=2026-01-02T00:00:00Z')).statusCode,
    ).toBe(200);
    for (const query of ['from=yesterday', 'to=2026-11-02', 'groupBy=week', 'tenant=x']) {
      expectProblem(await usage(tenant.key, query), 400, 'validation_failed');
    }
  });
});
