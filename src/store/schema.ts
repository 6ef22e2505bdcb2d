import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';

/** Row types of the tables created by `migrations/`; keep in step with the SQL. */
export interface Database {
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  llm_calls: LlmCallsTable;
}

export interface TenantsTable {
  id: string;
  name: string;
  is_operator: Generated<boolean>;
  created_at: ColumnType<Date, never, never>;
  default_model: ColumnType<string | null, string | null | undefined, string | null>;
  allowed_models: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
}

export interface ApiKeysTable {
  id: string;
  tenant_id: string;
  name: string;
  prefix: string;
  key_hash: Buffer;
  scopes: string[];
  created_at: ColumnType<Date, never, never>;
  revoked_at: ColumnType<Date | null, never, Date | null>;
}

export interface LlmCallsTable {
  id: Generated<string>;
  tenant_id: string;
  workflow_id: string | null;
  provider: string;
  model: string;
  model_id: string;
  attempt: number;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  cache_write_tokens: number;
  /** numeric: pg returns it as a string to keep its precision. */
  cost_usd: ColumnType<string, number, never>;
  latency_ms: number;
  ttft_ms: number | null;
  outcome: string;
  started_at: Date;
  recorded_at: ColumnType<Date, never, never>;
}

export type TenantRow = Selectable<TenantsTable>;
export type NewTenantRow = Insertable<TenantsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type NewApiKeyRow = Insertable<ApiKeysTable>;
export type NewLlmCallRow = Insertable<LlmCallsTable>;
