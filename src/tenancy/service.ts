import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { setNewest } from '../bounded-map.js';
import { badRequest, conflict, notFound } from '../errors.js';
import { apiKeysRepository } from '../store/api-keys.js';
import { type Db, type DbOrTx, inTransaction } from '../store/database.js';
import { decodeCursor, pageOf } from '../store/list-position.js';
import { tenantsRepository } from '../store/tenants.js';
import { workflowEventsRepository } from '../store/workflow-events.js';
import { notificationPayload } from '../tracker/notification.js';
import { hashApiKey, looksLikeApiKey } from './api-key-secret.js';
import {
  type CreatedTenant,
  insertTenantWithAdminKey,
  issueKey,
  type NewApiKey,
  type NewTenant,
} from './issue.js';
import {
  createPrincipalCache,
  DEFAULT_MAX_KNOWN,
  type PrincipalCache,
  type PrincipalsChange,
} from './principal-cache.js';
import { budgetColumns, toApiKey, toTenant } from './rows.js';
import type {
  ApiKey,
  IssuedApiKey,
  Principal,
  Tenant,
  TenantBudget,
  TenantRateLimit,
} from './types.js';

/** How precisely a key's lastUsedAt follows its use: each replica writes it at most this often per key. */
const LAST_USED_RESOLUTION_MS = 3_600_000;
/** Keys whose last marking this replica remembers; past it the oldest is forgotten (and may be written again). */
const MARKED_KEYS_MAX = 10_000;

/** Serialises the first-start bootstrap across replicas ("wm-boot" in ASCII). */
const BOOTSTRAP_LOCK_KEY = 0x776d2d626f6f74n;

/** A partial update of a tenant: what is absent stays; a null clears a setting back to its default. */
export interface TenantChanges {
  name?: string;
  defaultModel?: string | null;
  allowedModels?: string[] | null;
  /** Only the caps named change. */
  budget?: Partial<TenantBudget>;
  rateLimit?: Partial<TenantRateLimit>;
  /** true suspends the tenant (from now, or since it already was), false lifts it. */
  suspended?: boolean;
}

/** A change to a key: its name, or its own rate limit (`max` null: only the tenant's applies). */
export interface ApiKeyChange {
  name?: string;
  rateLimit?: { max: number | null };
}

/** A stream token's tenant as its requests need it (streamTenantOf). */
export interface StreamTenant {
  rateLimit: TenantRateLimit;
  /** Suspended, or gone: its stream tokens open nothing. */
  refused: boolean;
}

/** A page of tenants, newest first; `nextCursor` continues after its last one, null on the last page. */
export interface TenantPage {
  items: Tenant[];
  nextCursor: string | null;
}

export interface TenancyOptions {
  /** Principals of recently used keys; without one, every authentication reads the store. */
  principals?: PrincipalCache;
  /** This replica's id, the NOTIFY origin of key and tenant changes (it skips its own echo). */
  replicaId?: string;
}

export function createTenancyService(db: Db, options: TenancyOptions = {}) {
  const principals = options.principals ?? createPrincipalCache({ ttlMs: 0 });
  const origin = options.replicaId ?? randomUUID();

  /**
   * Inside the change's transaction, so other replicas hear of it only if it
   * commits; this replica drops its own entries after the commit (`drop`).
   */
  async function announce(
    tx: DbOrTx,
    change: PrincipalsChange & { issuedKeyHash?: string },
  ): Promise<void> {
    await workflowEventsRepository(tx).notify(
      notificationPayload({ kind: 'principals', ...change, origin }),
    );
  }

  /**
   * Announces a key just issued, in its transaction: from the commit on,
   * every replica knows it as active (the others from the NOTIFY's hash,
   * services.ts), so that a client address past its failed authentications
   * (http/auth-failures.ts) does not keep a new key out until its window
   * ends. This replica knows it at once: should the transaction fail, it
   * knows a key nobody holds, and knowing is no authorization (a known key
   * is still read).
   */
  async function announceIssued(tx: DbOrTx, issued: IssuedApiKey): Promise<void> {
    const keyHash = hashApiKey(issued.secret);
    await announce(tx, {
      tenantId: issued.apiKey.tenantId,
      keyId: issued.apiKey.id,
      issuedKeyHash: keyHash.toString('hex'),
    });
    principals.know([keyHash]);
  }

  /** When this replica last marked each key used (key id -> ms), so it writes at most once per LAST_USED_RESOLUTION_MS. */
  const markedAt = new Map<string, number>();

  /**
   * Records that `key` was used, to the hour, without holding the request
   * up: at most one UPDATE per key and hour from this replica (and the
   * statement itself skips a key another replica marked within the hour).
   */
  function markUsed(key: ApiKey): void {
    const now = Date.now();
    const last = Math.max(markedAt.get(key.id) ?? 0, key.lastUsedAt?.getTime() ?? 0);
    if (now - last < LAST_USED_RESOLUTION_MS) return;
    setNewest(markedAt, key.id, now, MARKED_KEYS_MAX);
    apiKeysRepository(db)
      .markUsed(key.id, LAST_USED_RESOLUTION_MS)
      .catch(() => {
        // A hint, not a record: the key's next request tries again.
        markedAt.delete(key.id);
      });
  }

  return {
    /**
     * Reads the keys active now (at most `limit`, by default the known
     * keys' default bound, DEFAULT_MAX_KNOWN; the most recently used
     * first) into the principal cache's known keys, so that
     * a replica just started tells its clients' keys from unknown ones
     * before it has served them (http/auth-failures.ts). Returns how many.
     */
    async loadKnownKeys(limit = DEFAULT_MAX_KNOWN): Promise<number> {
      const hashes = await apiKeysRepository(db).listActiveHashes(limit);
      // The most recently used last: the last forgotten.
      principals.know(hashes.reverse());
      return hashes.length;
    },

    /**
     * The principal behind a bearer secret, or undefined for an unknown or
     * revoked key. `beforeQuery` is called when the key is not in memory,
     * before the query that reads it, told whether the key is known to be
     * active (found so by this replica, or active when it loaded the known
     * keys), and may throw to refuse the query.
     */
    async authenticate(
      secret: string,
      options: { beforeQuery?: (key: { known: boolean }) => void } = {},
    ): Promise<Principal | undefined> {
      if (!looksLikeApiKey(secret)) return undefined;
      const keyHash = hashApiKey(secret);
      const principal = await principals.lookup(
        keyHash,
        async () => {
          const found = await apiKeysRepository(db).findActiveByHash(keyHash);
          return found && { tenant: toTenant(found.tenant), key: toApiKey(found.key) };
        },
        options.beforeQuery,
      );
      if (principal) markUsed(principal.key);
      return principal;
    },

    /**
     * What a request carrying a stream token, and so no principal, needs
     * of its tenant: its rate limit, and whether it is suspended (or gone).
     * One query by primary key per such request (an event stream opened or
     * reopened), read afresh so a change applies at once.
     */
    async streamTenantOf(tenantId: string): Promise<StreamTenant> {
      const row = await tenantsRepository(db).findById(tenantId);
      return {
        rateLimit: { max: row?.rate_limit_max ?? null },
        refused: row === undefined || row.suspended_at !== null,
      };
    },

    /** Model settings are checked against the catalogue by the caller. */
    async createTenant(input: NewTenant): Promise<CreatedTenant> {
      return inTransaction(db, async (tx) => {
        const created = await insertTenantWithAdminKey(tx, { ...input, isOperator: false });
        await announceIssued(tx, created.adminKey);
        return created;
      });
    },

    async getTenant(id: string): Promise<Tenant> {
      const row = await tenantsRepository(db).findById(id);
      if (!row) throw notFound('Tenant');
      return toTenant(row);
    },

    /** Every tenant, the operator's among them, newest first; `cursor` continues after a previous page. */
    async listTenants(query: { limit: number; cursor?: string }): Promise<TenantPage> {
      const rows = await tenantsRepository(db).list({
        // One more than asked tells whether another page follows.
        limit: query.limit + 1,
        after: query.cursor === undefined ? undefined : decodeCursor(query.cursor),
      });
      return pageOf(rows, { limit: query.limit, order: 'created' }, toTenant);
    },

    /**
     * Applies `changes` to a tenant and returns it as it is now (404 when
     * there is none). `check` sees the tenant as it would be, under the
     * row's lock, and throws to refuse it: settings that depend on each
     * other (a default model among the allowed ones) are checked against
     * what is stored, not against a read a concurrent update made stale.
     * Workflows created afterwards see the new settings, on every replica
     * at once (its cached principals are invalidated); running ones keep
     * the budget they were created with.
     */
    async updateTenant(
      id: string,
      changes: TenantChanges,
      check?: (next: Tenant) => void,
    ): Promise<Tenant> {
      const tenant = await inTransaction(db, async (tx) => {
        const tenants = tenantsRepository(tx);
        const row = await tenants.lockById(id);
        if (!row) throw notFound('Tenant');
        const current = toTenant(row);
        const budget = changes.budget ?? {};
        const next: Tenant = {
          ...current,
          name: changes.name ?? current.name,
          defaultModel: changed(changes.defaultModel, current.defaultModel),
          allowedModels: changed(changes.allowedModels, current.allowedModels),
          budget: {
            maxIterations: changed(budget.maxIterations, current.budget.maxIterations),
            maxTokens: changed(budget.maxTokens, current.budget.maxTokens),
            maxCostUsd: changed(budget.maxCostUsd, current.budget.maxCostUsd),
          },
          rateLimit: { max: changed(changes.rateLimit?.max, current.rateLimit.max) },
          suspendedAt: suspendedSince(changes.suspended, current.suspendedAt),
        };
        if (next.isOperator && next.suspendedAt) {
          throw badRequest(
            'operator_not_suspendable',
            'The operator tenant cannot be suspended: its admins manage the others',
            [{ field: 'body.suspended', message: 'the operator tenant cannot be suspended' }],
          );
        }
        check?.(next);
        const updated = await tenants.update(id, {
          name: next.name,
          default_model: next.defaultModel,
          allowed_models: next.allowedModels,
          ...budgetColumns(next.budget),
          rate_limit_max: next.rateLimit.max,
          suspended_at: next.suspendedAt,
        });
        if (!updated) throw notFound('Tenant');
        await announce(tx, { tenantId: id, keyId: null });
        return toTenant(updated);
      });
      principals.drop({ tenantId: id, keyId: null });
      return tenant;
    },

    /**
     * Creates the operator tenant and its first admin key when the database
     * has no tenant yet. Replicas starting together on an empty database
     * queue on an advisory lock; exactly one of them gets the key back.
     *
     * `deliver` hands the key to the operator before the commit: a key that
     * is committed has been delivered, whatever fails or kills the process
     * next, and a key delivered whose commit never came is replaced by the
     * next start's bootstrap. Nothing else ever reads the key's secret.
     */
    async bootstrap(
      deliver?: (created: CreatedTenant) => Promise<void>,
    ): Promise<CreatedTenant | undefined> {
      return inTransaction(db, async (tx) => {
        await sql`SELECT pg_advisory_xact_lock(${BOOTSTRAP_LOCK_KEY.toString()}::bigint)`.execute(
          tx,
        );
        if ((await tenantsRepository(tx).count()) > 0) return undefined;
        const created = await insertTenantWithAdminKey(tx, {
          name: 'operator',
          adminKeyName: 'bootstrap admin key',
          isOperator: true,
        });
        // Last in the transaction: no statement follows that a stale plan
        // could fail (inTransaction), so the key is delivered once.
        await deliver?.(created);
        return created;
      });
    },

    async issueKey(tenantId: string, input: NewApiKey): Promise<IssuedApiKey> {
      return inTransaction(db, async (tx) => {
        const issued = await issueKey(tx, tenantId, input);
        await announceIssued(tx, issued);
        return issued;
      });
    },

    async listKeys(tenantId: string): Promise<ApiKey[]> {
      return (await apiKeysRepository(db).listByTenant(tenantId)).map(toApiKey);
    },

    async getKey(tenantId: string, id: string): Promise<ApiKey> {
      const row = await apiKeysRepository(db).findById(tenantId, id);
      if (!row) throw notFound('API key');
      return toApiKey(row);
    },

    /**
     * Renames a key of the tenant or changes its own rate limit (null: only
     * the tenant's applies), revoked ones too. Applies to the key's next
     * request on every replica: their cached principals of it are dropped,
     * as a revocation drops them.
     */
    async updateKey(tenantId: string, id: string, change: ApiKeyChange): Promise<ApiKey> {
      const key = await inTransaction(db, async (tx) => {
        const updated = await apiKeysRepository(tx).update(tenantId, id, {
          ...(change.name === undefined ? {} : { name: change.name }),
          ...(change.rateLimit === undefined ? {} : { rate_limit_max: change.rateLimit.max }),
        });
        if (!updated) throw notFound('API key');
        await announce(tx, { tenantId, keyId: id });
        return toApiKey(updated);
      });
      principals.drop({ tenantId, keyId: id });
      return key;
    },

    /**
     * Revokes a key of the tenant; revoking a revoked key changes nothing.
     * The key stops authenticating at once, on every replica.
     * The tenant's last active admin key cannot be revoked: nobody could
     * manage the tenant's keys afterwards.
     */
    async revokeKey(tenantId: string, id: string): Promise<ApiKey> {
      const key = await inTransaction(db, async (tx) => {
        const keys = apiKeysRepository(tx);
        const activeAdmins = await keys.lockActiveAdminKeyIds(tenantId);
        const row = await keys.findById(tenantId, id);
        if (!row) throw notFound('API key');
        if (row.revoked_at) return toApiKey(row);
        if (activeAdmins.length === 1 && activeAdmins[0] === id) {
          throw conflict(
            'last_admin_key',
            'This is the tenant’s last active admin key; issue another admin key before revoking it',
          );
        }
        const revoked = await keys.revoke(tenantId, id, new Date());
        if (!revoked) throw notFound('API key');
        await announce(tx, { tenantId, keyId: id });
        return toApiKey(revoked);
      });
      principals.drop({ tenantId, keyId: id });
      return key;
    },
  };
}

export type TenancyService = ReturnType<typeof createTenancyService>;

/** When a tenant is suspended since after a change: kept as it is unless `suspended` says otherwise. */
function suspendedSince(suspended: boolean | undefined, current: Date | null): Date | null {
  if (suspended === undefined) return current;
  return suspended ? (current ?? new Date()) : null;
}

/** A setting after a partial update: absent keeps the current value, null clears it. */
function changed<T>(sent: T | undefined, current: T): T {
  return sent === undefined ? current : sent;
}
