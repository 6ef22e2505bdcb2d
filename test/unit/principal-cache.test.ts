import { describe, expect, it, vi } from 'vitest';
import { createPrincipalCache } from '../../src/tenancy/principal-cache.js';
import type { Principal } from '../../src/tenancy/types.js';
import { notificationPayload, parseNotification } from '../../src/tracker/notification.js';

function principal(tenantId: string, keyId: string): Principal {
  return {
    tenant: {
      id: tenantId,
      name: tenantId,
      isOperator: false,
      createdAt: new Date(0),
      defaultModel: null,
      allowedModels: null,
      budget: { maxIterations: null, maxTokens: null, maxCostUsd: null },
      rateLimit: { max: null },
      suspendedAt: null,
    },
    key: {
      id: keyId,
      tenantId,
      name: keyId,
      prefix: 'wmk_test',
      scopes: ['member'],
      createdAt: new Date(0),
      revokedAt: null,
      expiresAt: null,
      lastUsedAt: null,
      rateLimit: { max: null },
    },
  };
}

const hash = (name: string) => Buffer.from(name.padEnd(32, '.'));

/** A cache on a clock the test moves, listening as it is once the hub is up. */
function listeningCache(options: { ttlMs?: number; maxEntries?: number; maxKnown?: number } = {}) {
  const clock = { now: 1_000 };
  const cache = createPrincipalCache({
    ttlMs: options.ttlMs ?? 60_000,
    maxEntries: options.maxEntries,
    maxKnown: options.maxKnown,
    now: () => clock.now,
  });
  cache.setListening(true);
  return { cache, clock };
}

/** A load that resolves when the test says so. */
function deferredLoad(result: Principal | undefined) {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const load = vi.fn(async () => {
    await gate;
    return result;
  });
  return { load, release };
}

describe('principal cache', () => {
  it('serves a fresh entry without loading and loads again once it expired', async () => {
    const { cache, clock } = listeningCache({ ttlMs: 1_000 });
    const load = vi.fn(async () => principal('t1', 'k1'));
    await cache.lookup(hash('a'), load);
    clock.now += 999;
    expect(await cache.lookup(hash('a'), load)).toEqual(principal('t1', 'k1'));
    expect(load).toHaveBeenCalledTimes(1);
    clock.now += 1;
    await cache.lookup(hash('a'), load);
    expect(load).toHaveBeenCalledTimes(2);
  });

  it('with a TTL of 0 loads every time and keeps nothing', async () => {
    const { cache } = listeningCache({ ttlMs: 0 });
    const load = vi.fn(async () => principal('t1', 'k1'));
    await cache.lookup(hash('a'), load);
    await cache.lookup(hash('a'), load);
    expect(load).toHaveBeenCalledTimes(2);
    expect(cache.size()).toBe(0);
  });

  it('concurrent lookups of one uncached key share one load', async () => {
    const { cache } = listeningCache();
    const { load, release } = deferredLoad(principal('t1', 'k1'));
    const lookups = [1, 2, 3].map(() => cache.lookup(hash('a'), load));
    release();
    const results = await Promise.all(lookups);
    expect(load).toHaveBeenCalledTimes(1);
    expect(results.every((result) => result?.key.id === 'k1')).toBe(true);
  });

  it('tells beforeLoad whether the key was found active before, after its entry expired or was dropped; a refusal thrown there loads nothing', async () => {
    const { cache, clock } = listeningCache({ ttlMs: 1_000 });
    const found = vi.fn(async () => principal('t1', 'k1'));
    const seen: boolean[] = [];
    const before = (key: { known: boolean }) => seen.push(key.known);
    await cache.lookup(hash('a'), found, before);
    // Fresh: no load, so no beforeLoad.
    await cache.lookup(hash('a'), found, before);
    clock.now += 1_000;
    await cache.lookup(hash('a'), found, before);
    cache.drop({ tenantId: 't1', keyId: null });
    await cache.lookup(hash('a'), found, before);
    const unknown = vi.fn(async () => undefined);
    await cache.lookup(hash('b'), unknown, before);
    await cache.lookup(hash('b'), unknown, before);
    expect(seen).toEqual([false, true, true, false, false]);

    // Found revoked since: no longer known, so its reads are bounded again.
    const revoked = vi.fn(async () => undefined);
    clock.now += 1_000;
    await cache.lookup(hash('a'), revoked, before);
    await cache.lookup(hash('a'), revoked, before);
    expect(seen).toEqual([false, true, true, false, false, true, false]);

    const refused = vi.fn(async () => principal('t1', 'k2'));
    await expect(
      cache.lookup(hash('c'), refused, () => {
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(refused).not.toHaveBeenCalled();
    // Nothing was left loading: the next lookup loads.
    expect(await cache.lookup(hash('c'), refused)).toEqual(principal('t1', 'k2'));
  });

  it('knows the keys it is told are active, up to maxKnown, the first told forgotten first', async () => {
    const { cache } = listeningCache({ maxKnown: 2 });
    cache.know([hash('a'), hash('b'), hash('c')]);
    const seen: Array<[string, boolean]> = [];
    for (const id of ['a', 'b', 'c']) {
      await cache.lookup(
        hash(id),
        async () => undefined,
        (key) => seen.push([id, key.known]),
      );
    }
    expect(seen).toEqual([
      ['a', false],
      ['b', true],
      ['c', true],
    ]);
  });

  it('does not keep unknown or revoked keys', async () => {
    const { cache } = listeningCache();
    const load = vi.fn(async () => undefined);
    expect(await cache.lookup(hash('a'), load)).toBeUndefined();
    expect(await cache.lookup(hash('a'), load)).toBeUndefined();
    expect(load).toHaveBeenCalledTimes(2);
    expect(cache.size()).toBe(0);
  });

  it('holds at most maxEntries, evicting the oldest', async () => {
    const { cache } = listeningCache({ maxEntries: 2 });
    const loads = ['a', 'b', 'c'].map((name) => vi.fn(async () => principal('t1', name)));
    for (const [index, name] of ['a', 'b', 'c'].entries()) {
      await cache.lookup(hash(name), loads[index] as () => Promise<Principal>);
    }
    expect(cache.size()).toBe(2);
    await cache.lookup(hash('c'), loads[2] as () => Promise<Principal>);
    await cache.lookup(hash('a'), loads[0] as () => Promise<Principal>);
    expect(loads.map((load) => load.mock.calls.length)).toEqual([2, 1, 1]);
  });

  it('drops one key, or every key of a tenant', async () => {
    const { cache } = listeningCache();
    const entries = [
      ['a', principal('t1', 'k1')],
      ['b', principal('t1', 'k2')],
      ['c', principal('t2', 'k3')],
    ] as const;
    for (const [name, found] of entries) await cache.lookup(hash(name), async () => found);
    cache.drop({ tenantId: 't1', keyId: 'k1' });
    expect(cache.size()).toBe(2);
    cache.drop({ tenantId: 't1', keyId: null });
    expect(cache.size()).toBe(1);
    const load = vi.fn(async () => principal('t2', 'k3'));
    await cache.lookup(hash('c'), load);
    expect(load).not.toHaveBeenCalled();
  });

  it('a load in flight during a drop is returned but not kept, and later lookups do not join it', async () => {
    const { cache } = listeningCache();
    const stale = deferredLoad(principal('t1', 'k1'));
    const first = cache.lookup(hash('a'), stale.load);
    cache.drop({ tenantId: 't1', keyId: 'k1' });
    const fresh = vi.fn(async () => undefined);
    expect(await cache.lookup(hash('a'), fresh)).toBeUndefined();
    expect(fresh).toHaveBeenCalledTimes(1);
    stale.release();
    expect((await first)?.key.id).toBe('k1');
    expect(cache.size()).toBe(0);
  });

  it('keeps nothing until the hub listens, and empties whenever its connection goes or comes back', async () => {
    const cache = createPrincipalCache({ ttlMs: 60_000 });
    const load = vi.fn(async () => principal('t1', 'k1'));
    await cache.lookup(hash('a'), load);
    expect(cache.size()).toBe(0);

    cache.setListening(true);
    await cache.lookup(hash('a'), load);
    expect(cache.size()).toBe(1);
    cache.setListening(false);
    expect(cache.size()).toBe(0);
    await cache.lookup(hash('a'), load);
    expect(cache.size()).toBe(0);

    cache.setListening(true);
    await cache.lookup(hash('a'), load);
    const inFlight = deferredLoad(principal('t1', 'k2'));
    const pending = cache.lookup(hash('b'), inFlight.load);
    cache.setListening(true);
    inFlight.release();
    await pending;
    expect(cache.size()).toBe(0);
  });
});

describe('principals notification', () => {
  it('round-trips a key and a tenant change through the NOTIFY payload', () => {
    for (const keyId of ['k1', null]) {
      const notification = { kind: 'principals' as const, tenantId: 't1', keyId, origin: 'r1' };
      const payload = notificationPayload(notification);
      expect(JSON.parse(payload)).toMatchObject({ k: 'a' });
      expect(parseNotification(payload)).toEqual(notification);
    }
  });
});
