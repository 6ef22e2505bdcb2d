import { setNewest } from '../bounded-map.js';
import type { Principal } from './types.js';

/**
 * The principals of recently used API keys, in this replica's memory, so
 * that a /v1 request authenticates without a Postgres round trip (~0.5-1 ms
 * each here). Keyed by the key's hash, never its secret.
 *
 * Revocation stays immediate: every change to what a principal holds (a
 * key revoked, a tenant updated) drops it here after commit and NOTIFYs the
 * other replicas, whose event hub calls `drop`. Entries are kept only while
 * the hub listens: when its connection drops the cache empties and stays
 * empty until LISTEN is back, since invalidations sent meanwhile are lost.
 * The TTL bounds staleness should a notification be lost anyway.
 *
 * Only principals are cached, never "unknown key": a flood of random keys
 * costs no memory here, and a query each until its client address has
 * spent AUTH_FAILURE_LIMIT (http/auth-failures.ts), which `beforeLoad`
 * checks. Keys known to be active are remembered apart (bounded, with no
 * TTL): those active when the replica started (`know`, tenancy/service.ts
 * loadKnownKeys) and those found active since; such an address's clients
 * with one of them are still read, on a replica just started too.
 */

/** What a change touched: one key of a tenant, or (keyId null) every key of it. */
export interface PrincipalsChange {
  tenantId: string;
  keyId: string | null;
}

export interface PrincipalCacheOptions {
  /** How long an entry is served; 0 turns the cache off (every lookup loads). */
  ttlMs: number;
  /** Entries kept; past it the oldest is evicted. */
  maxEntries?: number;
  /** Keys remembered as known to be active; past it the oldest is forgotten. */
  maxKnown?: number;
  /** Milliseconds clock; tests move it. */
  now?: () => number;
}

/** More keys than one replica serves in a TTL; the bound only caps memory. */
const DEFAULT_MAX_ENTRIES = 10_000;
/** Known keys kept by hash (~150 bytes each): ~15 MB at most. */
export const DEFAULT_MAX_KNOWN = 100_000;

interface Entry {
  /** Shared by every request of the key: read-only. */
  principal: Principal;
  expiresAt: number;
}

export function createPrincipalCache(options: PrincipalCacheOptions) {
  const maxEntries = options.maxEntries ?? DEFAULT_MAX_ENTRIES;
  const maxKnown = options.maxKnown ?? DEFAULT_MAX_KNOWN;
  const now = options.now ?? Date.now;
  /** By key hash (hex), oldest insertion first: Map keeps insertion order. */
  const entries = new Map<string, Entry>();
  /** Loads in progress by key hash, so concurrent requests of one key share a query. */
  const loading = new Map<string, Promise<Principal | undefined>>();
  /**
   * Bumped by every invalidation: a load that began before one may have
   * read the row as it was, so its result is returned but not kept.
   */
  let generation = 0;
  let listening = false;
  /**
   * Keys known to be active, by hash, oldest first, until a read finds one
   * revoked: found active by this replica, or active when it read the
   * active keys (`know`). Their principal may not be in the cache (never
   * read here, TTL, a change) but the key is known, which `beforeLoad` is
   * told. Not an authorization: a key is still read.
   */
  const known = new Map<string, true>();

  function invalidate(): void {
    generation += 1;
    // Later lookups must not join a load that may have read the old row.
    loading.clear();
  }

  function keep(id: string, principal: Principal, expiresAt: number): void {
    entries.delete(id);
    if (entries.size >= maxEntries) {
      const oldest = entries.keys().next();
      if (!oldest.done) entries.delete(oldest.value);
    }
    entries.set(id, { principal, expiresAt });
  }

  function startLoad(
    id: string,
    load: () => Promise<Principal | undefined>,
  ): Promise<Principal | undefined> {
    const startedGeneration = generation;
    // The TTL counts from before the read: that is how old the row may be.
    const expiresAt = now() + options.ttlMs;
    const pending = load()
      .then((principal) => {
        noteFound(id, principal);
        if (principal && listening && generation === startedGeneration) {
          keep(id, principal, expiresAt);
        }
        return principal;
      })
      .finally(() => {
        if (loading.get(id) === pending) loading.delete(id);
      });
    loading.set(id, pending);
    return pending;
  }

  /** Remembers a key found active; forgets one found revoked since, whose reads are bounded again. */
  function noteFound(id: string, principal: Principal | undefined): void {
    if (principal) setNewest(known, id, true, maxKnown);
    else known.delete(id);
  }

  /** What `beforeLoad` threw for the key about to be loaded, as a rejection; undefined when it let the load go. */
  function refusalOf(
    id: string,
    beforeLoad: ((key: { known: boolean }) => void) | undefined,
  ): Promise<never> | undefined {
    try {
      beforeLoad?.({ known: known.has(id) });
      return undefined;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  return {
    /**
     * The principal of `keyHash`: from memory when fresh, or from a load of
     * it in progress, else from `load` (undefined: unknown or revoked), after
     * `beforeLoad`, which may throw to refuse the load; it is told whether
     * this replica has found the key active before.
     */
    lookup(
      keyHash: Buffer,
      load: () => Promise<Principal | undefined>,
      beforeLoad?: (key: { known: boolean }) => void,
    ): Promise<Principal | undefined> {
      const id = keyHash.toString('hex');
      if (options.ttlMs === 0) {
        return (
          refusalOf(id, beforeLoad) ??
          load().then((principal) => {
            noteFound(id, principal);
            return principal;
          })
        );
      }
      const entry = entries.get(id);
      if (entry) {
        if (entry.expiresAt > now()) return Promise.resolve(entry.principal);
        entries.delete(id);
      }
      return loading.get(id) ?? refusalOf(id, beforeLoad) ?? startLoad(id, load);
    },

    /**
     * Forgets the principals a committed change touched. A scan: changes
     * are operator actions, rare, and 10,000 entries take well under a
     * millisecond; an index by tenant would cost every insertion instead.
     */
    drop(change: PrincipalsChange): void {
      invalidate();
      for (const [id, { principal }] of entries) {
        if (principal.tenant.id !== change.tenantId) continue;
        if (change.keyId === null || principal.key.id === change.keyId) entries.delete(id);
      }
    },

    /**
     * Told by the event hub whether its LISTEN connection is up. Either way
     * the cache empties: on loss, invalidations stop arriving; on
     * (re)connect, those sent while it was down were missed.
     */
    setListening(up: boolean): void {
      listening = up;
      invalidate();
      entries.clear();
    },

    /**
     * Remembers keys read as active (by hash), those that matter most last:
     * past `maxKnown`, the first given are forgotten first.
     */
    know(keyHashes: readonly Buffer[]): void {
      for (const keyHash of keyHashes) setNewest(known, keyHash.toString('hex'), true, maxKnown);
    },

    /** Entries held (tests). */
    size: (): number => entries.size,
  };
}

export type PrincipalCache = ReturnType<typeof createPrincipalCache>;
