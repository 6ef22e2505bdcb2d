import { type RawBuilder, sql } from 'kysely';
import type { DbOrTx } from './database.js';
import type { NewLlmCallRow } from './schema.js';

export function llmCallsRepository(db: DbOrTx) {
  return {
    /**
     * One INSERT per batch: the ledger writes in batches, not a round trip
     * per attempt. The rows travel as one JSON parameter, so every batch has
     * the same text (prepared once per connection) and nobody handles 15
     * parameters a row: as a multi-row VALUES, a 60-row batch had 900, and
     * building it cost ~23 µs per workflow in bench/simple-path's profile.
     */
    async insertMany(rows: NewLlmCallRow[]): Promise<void> {
      if (rows.length === 0) return;
      await insertLlmCalls(sql`${JSON.stringify(rows)}::jsonb`).execute(db);
    },

    /**
     * Deletes up to `limit` rows whose call started before `cutoff`; returns
     * how many. The index on (tenant_id, started_at) serves the scan, one
     * range per tenant (a LATERAL per tenant row), so the purge needs no
     * index of its own. SKIP LOCKED: replicas purging together each take
     * rows the others have not.
     */
    async deleteStartedBefore(cutoff: Date, limit: number): Promise<number> {
      const result = await sql`
        DELETE FROM llm_calls
        WHERE id IN (
          SELECT old.id FROM tenants
          CROSS JOIN LATERAL (
            SELECT id FROM llm_calls
            WHERE tenant_id = tenants.id AND started_at < ${cutoff}
            ORDER BY started_at
            LIMIT ${limit}
            FOR UPDATE SKIP LOCKED
          ) AS old
          LIMIT ${limit}
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },

    async listByWorkflow(tenantId: string, workflowId: string) {
      return db
        .selectFrom('llm_calls')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('workflow_id', '=', workflowId)
        .orderBy('id')
        .execute();
    },

    async listByTenant(tenantId: string, limit = 100) {
      return db
        .selectFrom('llm_calls')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('id', 'desc')
        .limit(limit)
        .execute();
    },
  };
}

/**
 * The INSERT of ledger rows read from `records` (a jsonb array of
 * NewLlmCallRow), each joined with the row of `from` when given: a run's
 * statement writes its workflow's rows only if it writes the workflow
 * (store/event-statement-parts.ts, usageWrittenFrom).
 */
export function insertLlmCalls(
  records: RawBuilder<unknown>,
  from?: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`INSERT INTO llm_calls (tenant_id, workflow_id, provider, model, model_id, attempt,
      input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd,
      latency_ms, ttft_ms, outcome, started_at)
    SELECT r.tenant_id, r.workflow_id, r.provider, r.model, r.model_id, r.attempt,
      r.input_tokens, r.output_tokens, r.cached_input_tokens, r.cache_write_tokens, r.cost_usd,
      r.latency_ms, r.ttft_ms, r.outcome, r.started_at
    FROM ${from ? sql`${from}, ` : sql``}jsonb_to_recordset(${records}) AS r(tenant_id uuid,
      workflow_id uuid, provider text, model text, model_id text, attempt integer,
      input_tokens integer, output_tokens integer, cached_input_tokens integer,
      cache_write_tokens integer, cost_usd numeric, latency_ms integer, ttft_ms integer,
      outcome text, started_at timestamptz)`;
}
