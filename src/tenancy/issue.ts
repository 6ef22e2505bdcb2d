import { randomUUID } from 'node:crypto';
import { badRequest } from '../errors.js';
import { apiKeysRepository } from '../store/api-keys.js';
import type { DbOrTx } from '../store/database.js';
import { tenantsRepository } from '../store/tenants.js';
import { generateApiKey } from './api-key-secret.js';
import { budgetColumns, toApiKey, toTenant } from './rows.js';
import type { IssuedApiKey, Scope, Tenant, TenantBudget, TenantRateLimit } from './types.js';

/** Tenants and API keys as they are created: the rows written, in the caller's transaction. */

export interface CreatedTenant {
  tenant: Tenant;
  adminKey: IssuedApiKey;
}

export interface NewTenant {
  name: string;
  adminKeyName?: string;
  defaultModel?: string;
  allowedModels?: string[];
  budget?: Partial<TenantBudget>;
  rateLimit?: Partial<TenantRateLimit>;
}

/**
 * A key to issue: `expiresAt`, in the future, when it is to stop working
 * (none: never); `rateLimit`, its own limit within its tenant's (none: only
 * the tenant's).
 */
export interface NewApiKey {
  name: string;
  scopes: Scope[];
  expiresAt?: Date;
  rateLimit?: { max: number };
}

export async function insertTenantWithAdminKey(
  tx: DbOrTx,
  input: NewTenant & { isOperator: boolean },
): Promise<CreatedTenant> {
  const tenant = await tenantsRepository(tx).insert({
    id: randomUUID(),
    name: input.name,
    is_operator: input.isOperator,
    default_model: input.defaultModel ?? null,
    allowed_models: input.allowedModels ?? null,
    ...budgetColumns({ maxIterations: null, maxTokens: null, maxCostUsd: null, ...input.budget }),
    rate_limit_max: input.rateLimit?.max ?? null,
  });
  const adminKey = await issueKey(tx, tenant.id, {
    name: input.adminKeyName ?? 'admin key',
    scopes: ['admin'],
  });
  return { tenant: toTenant(tenant), adminKey };
}

export async function issueKey(
  db: DbOrTx,
  tenantId: string,
  input: NewApiKey,
): Promise<IssuedApiKey> {
  if (input.expiresAt && input.expiresAt.getTime() <= Date.now()) {
    throw badRequest('invalid_expiry', 'An API key’s expiry must be in the future', [
      { field: 'body.expiresAt', message: 'must be in the future' },
    ]);
  }
  const generated = generateApiKey();
  const row = await apiKeysRepository(db).insert({
    id: randomUUID(),
    tenant_id: tenantId,
    name: input.name,
    prefix: generated.prefix,
    key_hash: generated.hash,
    scopes: [...new Set(input.scopes)],
    expires_at: input.expiresAt ?? null,
    rate_limit_max: input.rateLimit?.max ?? null,
  });
  return { apiKey: toApiKey(row), secret: generated.secret };
}
