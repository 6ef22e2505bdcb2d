import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/store/database.js';
import { llmCallsRepository, type UsageGrouping } from '../../src/store/llm-calls.js';
import { customAndGenericPlans, readsOf, statementOf } from '../support/query-plans.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * A usage report (GET /v1/usage) reads the tenant's ledger rows of its
 * range through llm_calls_tenant_time, and no others: not the other
 * tenants', nor its own outside the range, whatever the grouping; as the
 * custom plan of a statement run unnamed and as the generic plan a
 * prepared one settles on.
 */

let setup: TenantDatabase | undefined;
let handle: DatabaseHandle;

const TENANTS = 20;
/** Rows per tenant, one every 9.6 hours over 400 days; fewer in all than ANALYZE samples (30,000). */
const ROWS = 1000;
const RANGE_DAYS = 30;

beforeAll(async () => {
  setup = await createTenantDatabase();
  ({ handle } = setup);
  await sql`
    WITH tenant AS (
      INSERT INTO tenants (id, name)
      SELECT gen_random_uuid(), 'tenant ' || t FROM generate_series(2, ${TENANTS}::integer) AS t
      RETURNING id
    ), every_tenant AS (SELECT id FROM tenant UNION ALL SELECT ${setup.tenantId}::uuid)
    INSERT INTO llm_calls (tenant_id, provider, model, model_id, attempt, input_tokens,
      output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, latency_ms, outcome, started_at)
    SELECT every_tenant.id, 'oai', 'gpt-' || (i % 3), 'gpt', 1, 100, 10, 0, 0, 0.01, 100, 'ok',
      now() - i * interval '9.6 hours'
    FROM every_tenant, generate_series(1, ${ROWS}::integer) AS i`.execute(handle.db);
  await sql`ANALYZE llm_calls`.execute(handle.db);
});
afterAll(async () => {
  await setup?.close();
});

describe('a usage report', () => {
  it.each([undefined, 'model', 'day'] as const)(
    'grouped by %s: reads the range’s rows of its tenant through llm_calls_tenant_time, and no others',
    async (groupBy?: UsageGrouping) => {
      const to = new Date();
      const from = new Date(to.getTime() - RANGE_DAYS * 86_400_000);
      const query = { tenantId: setup?.tenantId ?? '', from, to, ...(groupBy ? { groupBy } : {}) };
      const [total] = await llmCallsRepository(handle.db).summarize(query);
      const inRange = Number(total?.calls);
      // One row every 9.6 hours: 2.5 a day.
      expect(inRange).toBeGreaterThanOrEqual(RANGE_DAYS * 2.5 - 1);
      const statement = await statementOf(handle.pool, (db) =>
        llmCallsRepository(db).summarize(query),
      );
      const { custom, generic } = await customAndGenericPlans(handle.pool, statement);
      for (const plan of [custom, generic]) {
        const reads = readsOf(plan, 'llm_calls');
        expect(reads.indexes).toEqual(['llm_calls_tenant_time']);
        expect(reads.rowsRead).toBe(inRange);
      }
    },
  );
});
