import type { ApiKeyRow, TenantRow } from '../store/schema.js';
import { type ApiKey, SCOPES, type Scope, type Tenant, type TenantBudget } from './types.js';

/** Tenants and API keys between their rows and what the service answers with. */

export function toTenant(row: TenantRow): Tenant {
  return {
    id: row.id,
    name: row.name,
    isOperator: row.is_operator,
    createdAt: row.created_at,
    defaultModel: row.default_model,
    allowedModels: row.allowed_models,
    budget: {
      maxIterations: row.budget_max_iterations,
      maxTokens: row.budget_max_tokens === null ? null : Number(row.budget_max_tokens),
      maxCostUsd: row.budget_max_cost_usd === null ? null : Number(row.budget_max_cost_usd),
    },
    rateLimit: { max: row.rate_limit_max },
    suspendedAt: row.suspended_at,
  };
}

/** A tenant's budget caps as its columns. */
export function budgetColumns(budget: TenantBudget) {
  return {
    budget_max_iterations: budget.maxIterations,
    budget_max_tokens: budget.maxTokens,
    budget_max_cost_usd: budget.maxCostUsd,
  };
}

export function toApiKey(row: ApiKeyRow): ApiKey {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    name: row.name,
    prefix: row.prefix,
    scopes: row.scopes.filter((scope): scope is Scope =>
      (SCOPES as readonly string[]).includes(scope),
    ),
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    expiresAt: row.expires_at,
    lastUsedAt: row.last_used_at,
    rateLimit: { max: row.rate_limit_max },
  };
}
