/**
 * Terminology of tenancy:
 * - tenant: an isolated customer of the service; every row carries its id.
 * - operator tenant: the tenant created at the first start; its admins may create tenants.
 * - API key: a bearer secret of one tenant with scopes; stored only as a hash.
 * - scope: `admin` (manage keys, and tenants for the operator) or `member` (use the API).
 *   `admin` includes everything `member` may do.
 * - principal: the tenant and key an authenticated request acts as.
 */
export const SCOPES = ['admin', 'member'] as const;
export type Scope = (typeof SCOPES)[number];

export interface Tenant {
  id: string;
  name: string;
  isOperator: boolean;
  createdAt: Date;
  /** Catalogue name used when neither the request nor the session names a model; null: the system default. */
  defaultModel: string | null;
  /** Catalogue names the tenant may use; null: all of them. */
  allowedModels: string[] | null;
  /** Caps on its workflows, overriding the configured defaults. */
  budget: TenantBudget;
  rateLimit: TenantRateLimit;
  /** Since when the operator has suspended it: its keys and stream tokens are refused. Null: not suspended. */
  suspendedAt: Date | null;
}

/** Most requests per window a tenant may be allowed: RATE_LIMIT_MAX's bound, and its override's. */
export const RATE_LIMIT_MAX_BOUND = 1_000_000;

/**
 * A tenant's rate limit, set by the operator (plans): `max` requests per
 * RATE_LIMIT_WINDOW_MS, counted over every replica; null inherits RATE_LIMIT_MAX.
 */
export interface TenantRateLimit {
  max: number | null;
}

/**
 * A tenant's budget overrides, set by the operator; each null inherits the
 * configured default (BUDGET_MAX_*). A workflow's request may only lower them.
 */
export interface TenantBudget {
  maxIterations: number | null;
  /** Input plus output tokens of all of a workflow's model turns. */
  maxTokens: number | null;
  maxCostUsd: number | null;
}

export interface ApiKey {
  id: string;
  tenantId: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  createdAt: Date;
  revokedAt: Date | null;
  /** When it stops authenticating (401 api_key_expired); null: never. */
  expiresAt: Date | null;
  /** When it was last used, to the hour; null: not yet. */
  lastUsedAt: Date | null;
  /** Its own limit, within its tenant's; null: only the tenant's applies. */
  rateLimit: ApiKeyRateLimit;
}

/** An API key's own rate limit: `max` requests per RATE_LIMIT_WINDOW_MS, counted over every replica. */
export interface ApiKeyRateLimit {
  max: number | null;
}

export interface Principal {
  tenant: Tenant;
  key: ApiKey;
}

/** A newly issued key: the only time its secret exists outside the client. */
export interface IssuedApiKey {
  apiKey: ApiKey;
  secret: string;
}

export function hasScope(principal: Principal, scope: Scope): boolean {
  return principal.key.scopes.includes('admin') || principal.key.scopes.includes(scope);
}
