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

    /**
     * The tenant's calls that started in [from, to), added up: one row for
     * all of them (`key` null) and, with `groupBy`, one per model, provider
     * or UTC day, in one statement (GROUPING SETS). A range scan of the
     * (tenant_id, started_at) index.
     */
    async summarize(query: UsageQuery): Promise<UsageSumRow[]> {
      const key = query.groupBy ? USAGE_KEYS[query.groupBy] : undefined;
      const result = await sql<UsageSumRow>`
        SELECT ${key ?? sql`NULL::text`} AS key,
          ${key ? sql`grouping(${key}) = 1` : sql`true`} AS is_total,
          count(*) AS calls,
          count(*) FILTER (WHERE outcome <> 'ok') AS failed_calls,
          coalesce(sum(input_tokens), 0) AS input_tokens,
          coalesce(sum(output_tokens), 0) AS output_tokens,
          coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
          coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens,
          coalesce(sum(cost_usd), 0) AS cost_usd
        FROM llm_calls
        WHERE tenant_id = ${query.tenantId}
          AND started_at >= ${query.from} AND started_at < ${query.to}
        GROUP BY ${key ? sql`GROUPING SETS ((), (${key}))` : sql`()`}
        ORDER BY is_total DESC, key`.execute(db);
      return result.rows;
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

/** What usage is added up by: each a group of its own. */
export const USAGE_GROUPINGS = ['model', 'provider', 'day'] as const;
export type UsageGrouping = (typeof USAGE_GROUPINGS)[number];

export interface UsageQuery {
  tenantId: string;
  /** Calls that started at or after it, */
  from: Date;
  /** and before it. */
  to: Date;
  groupBy?: UsageGrouping;
}

/** A sum of ledger rows; counts and tokens are bigints and the cost numeric, as strings. */
export interface UsageSumRow {
  /** The group's model, provider or UTC day (YYYY-MM-DD); null on the total. */
  key: string | null;
  is_total: boolean;
  calls: string;
  failed_calls: string;
  input_tokens: string;
  output_tokens: string;
  cached_input_tokens: string;
  cache_write_tokens: string;
  cost_usd: string;
}

/** The column each grouping adds up by. */
const USAGE_KEYS: Record<UsageGrouping, RawBuilder<string>> = {
  model: sql`model`,
  provider: sql`provider`,
  day: sql`to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
};

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
