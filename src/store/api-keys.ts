import { sql } from 'kysely';
import type { DbOrTx } from './database.js';
import type { ApiKeyRow, NewApiKeyRow, TenantRow } from './schema.js';

export interface ActiveKey {
  key: ApiKeyRow;
  tenant: TenantRow;
}

/**
 * Every query but `findActiveByHash` (which finds the tenant),
 * `listActiveHashes` (the replica's known keys) and the retention sweep's
 * `deleteEndedBefore` (across tenants) is scoped by tenant.
 */
export function apiKeysRepository(db: DbOrTx) {
  return {
    async insert(row: NewApiKeyRow): Promise<ApiKeyRow> {
      return db.insertInto('api_keys').values(row).returningAll().executeTakeFirstOrThrow();
    },

    /**
     * The hashes of keys neither revoked nor expired, at most `limit`, those
     * used most recently (then issued most recently) first. Across tenants,
     * for the replica's known keys (tenancy/service.ts loadKnownKeys).
     */
    async listActiveHashes(limit: number): Promise<Buffer[]> {
      const rows = await db
        .selectFrom('api_keys')
        .select('key_hash')
        .where('revoked_at', 'is', null)
        .where((eb) =>
          eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', sql<Date>`now()`)]),
        )
        .orderBy(sql`last_used_at DESC NULLS LAST`)
        .orderBy('created_at', 'desc')
        .limit(limit)
        .execute();
      return rows.map((row) => row.key_hash);
    },

    /** The key behind a bearer token with its tenant, unless revoked. Served by the unique index on key_hash. */
    async findActiveByHash(keyHash: Buffer): Promise<ActiveKey | undefined> {
      const row = await db
        .selectFrom('api_keys as k')
        .innerJoin('tenants as t', 't.id', 'k.tenant_id')
        .select([
          'k.id',
          'k.tenant_id',
          'k.name',
          'k.prefix',
          'k.key_hash',
          'k.scopes',
          'k.created_at',
          'k.revoked_at',
          'k.expires_at',
          'k.last_used_at',
          'k.rate_limit_max',
          't.name as tenant_name',
          't.is_operator as tenant_is_operator',
          't.created_at as tenant_created_at',
          't.default_model as tenant_default_model',
          't.allowed_models as tenant_allowed_models',
          't.budget_max_iterations as tenant_budget_max_iterations',
          't.budget_max_tokens as tenant_budget_max_tokens',
          't.budget_max_cost_usd as tenant_budget_max_cost_usd',
          't.rate_limit_max as tenant_rate_limit_max',
          't.suspended_at as tenant_suspended_at',
          't.endpoints_version as tenant_endpoints_version',
        ])
        .where('k.key_hash', '=', keyHash)
        .where('k.revoked_at', 'is', null)
        .executeTakeFirst();
      if (!row) return undefined;
      const {
        tenant_name,
        tenant_is_operator,
        tenant_created_at,
        tenant_default_model,
        tenant_allowed_models,
        tenant_budget_max_iterations,
        tenant_budget_max_tokens,
        tenant_budget_max_cost_usd,
        tenant_rate_limit_max,
        tenant_suspended_at,
        tenant_endpoints_version,
        ...key
      } = row;
      return {
        key,
        tenant: {
          id: key.tenant_id,
          name: tenant_name,
          is_operator: tenant_is_operator,
          created_at: tenant_created_at,
          default_model: tenant_default_model,
          allowed_models: tenant_allowed_models,
          budget_max_iterations: tenant_budget_max_iterations,
          budget_max_tokens: tenant_budget_max_tokens,
          budget_max_cost_usd: tenant_budget_max_cost_usd,
          rate_limit_max: tenant_rate_limit_max,
          suspended_at: tenant_suspended_at,
          endpoints_version: tenant_endpoints_version,
        },
      };
    },

    async listByTenant(tenantId: string): Promise<ApiKeyRow[]> {
      return db
        .selectFrom('api_keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
    },

    async findById(tenantId: string, id: string): Promise<ApiKeyRow | undefined> {
      return db
        .selectFrom('api_keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Locks the tenant's active admin keys (FOR UPDATE) so that two
     * concurrent revocations cannot both see "another admin key remains"
     * and leave the tenant with none.
     */
    async lockActiveAdminKeyIds(tenantId: string): Promise<string[]> {
      const rows = await db
        .selectFrom('api_keys')
        .select('id')
        .where('tenant_id', '=', tenantId)
        .where('revoked_at', 'is', null)
        .where(sql<boolean>`(expires_at IS NULL OR expires_at > now())`)
        .where(sql<boolean>`'admin' = ANY(scopes)`)
        .forUpdate()
        .execute();
      return rows.map((row) => row.id);
    },

    /**
     * Deletes up to `limit` keys of any tenant revoked, or expired, before
     * `cutoff` (the retention sweep); returns how many. Such a key
     * authenticates nothing, and nothing refers to a key's row, so only its
     * listing goes.
     * Keys are few per tenant: the scan needs no index of its own. SKIP
     * LOCKED: replicas sweeping together each take rows the others have not.
     */
    async deleteEndedBefore(cutoff: Date, limit: number): Promise<number> {
      // least() skips a NULL: a key's end is its revocation or its expiry, whichever came first.
      const result = await sql`
        DELETE FROM api_keys
        WHERE id IN (
          SELECT id FROM api_keys
          WHERE least(revoked_at, expires_at) < ${cutoff}
          ORDER BY least(revoked_at, expires_at)
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },

    /** Marks the key used now, unless it was within `resolutionMs`: at most one write per key and period. */
    async markUsed(id: string, resolutionMs: number): Promise<void> {
      await sql`
        UPDATE api_keys SET last_used_at = now()
        WHERE id = ${id}
          AND (last_used_at IS NULL
            OR last_used_at < now() - ${resolutionMs}::double precision * interval '1 millisecond')`.execute(
        db,
      );
    },

    /** Renames the key or changes its own rate limit; undefined for no such key of the tenant. */
    async update(
      tenantId: string,
      id: string,
      changes: { name?: string; rate_limit_max?: number | null },
    ): Promise<ApiKeyRow | undefined> {
      return db
        .updateTable('api_keys')
        .set(changes)
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirst();
    },

    async revoke(tenantId: string, id: string, at: Date): Promise<ApiKeyRow | undefined> {
      return db
        .updateTable('api_keys')
        .set({ revoked_at: at })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .returningAll()
        .executeTakeFirst();
    },
  };
}

export type ApiKeysRepository = ReturnType<typeof apiKeysRepository>;
