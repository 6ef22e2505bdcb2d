import type { ColumnType, Generated, Insertable, Selectable, Updateable } from 'kysely';

/** Row types of the tables created by `migrations/`; keep in step with the SQL. */
export interface Database {
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  llm_calls: LlmCallsTable;
  workflows: WorkflowsTable;
  workflow_events: WorkflowEventsTable;
  service_secrets: ServiceSecretsTable;
  http_tools: HttpToolsTable;
  sessions: SessionsTable;
  session_messages: SessionMessagesTable;
  mcp_servers: McpServersTable;
  workflow_turns: WorkflowTurnsTable;
  workflow_plans: WorkflowPlansTable;
  workflow_stage_attempts: WorkflowStageAttemptsTable;
  rate_limit_counts: RateLimitCountsTable;
}

export interface TenantsTable {
  id: string;
  name: string;
  is_operator: Generated<boolean>;
  created_at: ColumnType<Date, never, never>;
  default_model: ColumnType<string | null, string | null | undefined, string | null>;
  allowed_models: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
  /** Budget overrides; null inherits the configured default. bigint and numeric come back as strings. */
  budget_max_iterations: ColumnType<number | null, number | null | undefined, number | null>;
  budget_max_tokens: ColumnType<string | null, number | null | undefined, number | null>;
  budget_max_cost_usd: ColumnType<string | null, number | null | undefined, number | null>;
  /** Requests per RATE_LIMIT_WINDOW_MS in place of RATE_LIMIT_MAX (migration 0023); null inherits it. */
  rate_limit_max: ColumnType<number | null, number | null | undefined, number | null>;
  /** Since when the operator has suspended the tenant (migration 0025); null while it is not. */
  suspended_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** Changed by every change to the tenant's HTTP tools or MCP servers (migration 0014); a bigint, as a string. */
  endpoints_version: ColumnType<string, never, never>;
}

/** Requests let through per tenant and rate-limit window, summed over the replicas (migration 0028). */
export interface RateLimitCountsTable {
  key: string;
  window_ms: number;
  window_start: Date;
  /** bigint: a string when read. */
  count: ColumnType<string, number, number>;
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
  /** When it stops authenticating (migration 0026); null: never. Set at issue only. */
  expires_at: ColumnType<Date | null, Date | null | undefined, never>;
  /** When it was last used, to the hour (migration 0027); null: not since. */
  last_used_at: ColumnType<Date | null, never, never>;
  /** Its own rate limit (migration 0029); null: only its tenant's. */
  rate_limit_max: ColumnType<number | null, number | null | undefined, number | null>;
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

export interface WorkflowsTable {
  id: string;
  tenant_id: string;
  session_id: string | null;
  /** The session's last_seq its insert saw: the end of its runs' history (migration 0016). */
  session_seq: ColumnType<number | null, number | null | undefined, never>;
  status: string;
  awaiting_reason: string | null;
  mode: string;
  kind: string | null;
  model: string;
  input: string;
  tools: string[];
  metadata: ColumnType<Record<string, unknown>, string, string>;
  idempotency_key: string | null;
  request_hash: string | null;
  version: Generated<number>;
  last_seq: Generated<number>;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  result: ColumnType<unknown, string | null, string | null>;
  error: ColumnType<unknown, string | null, string | null>;
  /** The effective WorkflowBudget as a JSON string; null on workflows created before budgets. */
  budget: ColumnType<unknown, string | null | undefined, never>;
  /** bigint and numeric come back as strings from pg. */
  input_tokens: ColumnType<string, never, number | string>;
  output_tokens: ColumnType<string, never, number | string>;
  cached_input_tokens: ColumnType<string, never, number | string>;
  cost_usd: ColumnType<string, never, number | string>;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, never, Date>;
  started_at: Date | null;
  finished_at: Date | null;
  /** When it paused, while it waits for input; NULL otherwise. Written by the transitions only (migration 0019). */
  paused_at: ColumnType<Date | null, never, never>;
  /** Written by the lease sweep only (claimExpiredLeases). */
  takeovers_without_progress: ColumnType<number, never, never>;
  progress_at_takeover: ColumnType<number | null, never, never>;
}

export interface WorkflowEventsTable {
  workflow_id: string;
  seq: number;
  tenant_id: string;
  type: string;
  step: string | null;
  status: string;
  detail: ColumnType<Record<string, unknown>, string, never>;
  /** Set by the statement that appends the event (workflow-events.ts `encodeEvents`), else the insert's clock. */
  ts: ColumnType<Date, Date | undefined, never>;
  elapsed_ms: number | null;
}

export interface ServiceSecretsTable {
  name: string;
  value: Buffer;
  created_at: ColumnType<Date, never, never>;
}

export interface HttpToolsTable {
  id: string;
  tenant_id: string;
  name: string;
  description: string;
  /** A JSON Schema object; written as a JSON string. */
  parameters: ColumnType<Record<string, unknown>, string, string>;
  url: string;
  /** Header name -> value. The values are secrets: never returned by the API. */
  headers: ColumnType<Record<string, string>, string, string>;
  timeout_ms: number;
  sequential: boolean;
  /** Each call waits for the user's approval (migration 0022). */
  requires_approval: ColumnType<boolean, boolean | undefined, boolean>;
  created_at: ColumnType<Date, never, never>;
}

export interface McpServersTable {
  id: string;
  tenant_id: string;
  name: string;
  url: string;
  /** Header name -> value. The values are secrets: never returned by the API. */
  headers: ColumnType<Record<string, string>, string, string>;
  timeout_ms: number;
  /** The tools listed at registration, or when a change of its URL or headers listed them again; written as a JSON string. */
  tools: ColumnType<McpToolSnapshot[], string, string>;
  /** Each call of any of its tools waits for the user's approval (migration 0022). */
  requires_approval: ColumnType<boolean, boolean | undefined, boolean>;
  created_at: ColumnType<Date, never, never>;
}

/** One tool of an MCP server as its `tools/list` gave it. */
export interface McpToolSnapshot {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

export interface SessionsTable {
  id: string;
  tenant_id: string;
  title: string | null;
  metadata: ColumnType<Record<string, unknown>, string, string>;
  /** Catalogue name its workflows use when their request names none; null: none. */
  model: ColumnType<string | null, string | null | undefined, string | null>;
  last_seq: Generated<number>;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, never, Date>;
  /** Its latest message's created_at, its creation while it has none; set by the append only (exchangeAppend). */
  last_activity_at: ColumnType<Date, never, never>;
}

export interface SessionMessagesTable {
  session_id: string;
  seq: number;
  tenant_id: string;
  role: string;
  content: string;
  workflow_id: string | null;
  created_at: ColumnType<Date, never, never>;
}

export type WorkflowRow = Selectable<WorkflowsTable>;
export type WorkflowEventRow = Selectable<WorkflowEventsTable>;

export type TenantRow = Selectable<TenantsTable>;
export type NewTenantRow = Insertable<TenantsTable>;
export type TenantUpdate = Updateable<TenantsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type NewApiKeyRow = Insertable<ApiKeysTable>;
export type NewLlmCallRow = Insertable<LlmCallsTable>;
export type HttpToolRow = Selectable<HttpToolsTable>;
export type NewHttpToolRow = Insertable<HttpToolsTable>;
export type McpServerRow = Selectable<McpServersTable>;
export type NewMcpServerRow = Insertable<McpServersTable>;
export type SessionRow = Selectable<SessionsTable>;
export type SessionMessageRow = Selectable<SessionMessagesTable>;

export interface WorkflowTurnsTable {
  workflow_id: string;
  turn: number;
  tenant_id: string;
  /** Versioned loop state of one turn; written as a JSON string. */
  state: ColumnType<unknown, string, never>;
  created_at: ColumnType<Date, never, never>;
}

export interface WorkflowPlansTable {
  workflow_id: string;
  revision: number;
  tenant_id: string;
  /** Versioned ExecutionPlan; written as a JSON string. */
  plan: ColumnType<unknown, string, never>;
  created_at: ColumnType<Date, never, never>;
}

export interface WorkflowStageAttemptsTable {
  workflow_id: string;
  stage_id: string;
  attempt: number;
  tenant_id: string;
  plan_revision: number;
  status: string;
  reason: string;
  feedback: string | null;
  result: string | null;
  /** Written as a JSON string. */
  validation: ColumnType<unknown, string | null, string | null>;
  error: ColumnType<unknown, string | null, string | null>;
  input_tokens: ColumnType<number, number | undefined, number>;
  output_tokens: ColumnType<number, number | undefined, number>;
  cached_input_tokens: ColumnType<number, number | undefined, number>;
  /** numeric: pg returns it as a string to keep its precision. */
  cost_usd: ColumnType<string, number | undefined, number>;
  accepted_at: Date | null;
  created_at: ColumnType<Date, never, never>;
  started_at: Date | null;
  finished_at: Date | null;
  elapsed_ms: number | null;
}
