import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import {
  createRateLimitCounts,
  type RateLimitCounts,
} from '../../src/tenancy/rate-limit-counts.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

/**
 * The rate limit's counts (tenancy/rate-limit-counts.ts) against a real
 * PostgreSQL: sliding windows on a clock the test sets, and two
 * "replicas" (two instances on one database) that share their counts.
 */

const WINDOW_MS = 60_000;
/**
 * A window start a little ahead of the real clock: counts over two hours
 * old are deleted whatever their window (store/rate-limit-counts.ts).
 */
const T0 = (Math.floor(Date.now() / WINDOW_MS) + 10) * WINDOW_MS;

let database: TestDatabase;
let handle: DatabaseHandle;

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 4, log: pino({ level: 'silent' }) });
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

/** One request of `key` against its limit alone, as `{ current, ttl }`. */
function take(counts: RateLimitCounts, key: string, max: number): { current: number; ttl: number } {
  const { current, ttl } = counts.take([{ key, max }]);
  return { current, ttl };
}

/** The shared count of `key` (one window's row in these tests). */
async function storedCount(key: string): Promise<number> {
  const row = await handle.db
    .selectFrom('rate_limit_counts')
    .select('count')
    .where('key', '=', key)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** Counts on a clock the test moves (`clock.at`), syncing only when told. */
function countsAt(clock: { at: number }, options: { syncEveryMs?: number } = {}) {
  const syncs: string[] = [];
  const counts = createRateLimitCounts({
    windowMs: WINDOW_MS,
    syncEveryMs: options.syncEveryMs ?? 0,
    db: handle.db,
    log: pino({ level: 'silent' }),
    onSync: (result) => syncs.push(result),
    now: () => clock.at,
  });
  return { counts, syncs };
}

describe('rate-limit counts', () => {
  it('lets `max` through in a window, refuses the next without counting it, and says when to retry', () => {
    const clock = { at: T0 + 10_000 };
    const { counts } = countsAt(clock);
    expect([1, 2, 3].map(() => take(counts, 'tenant:a', 3))).toEqual([
      { current: 1, ttl: 50_000 },
      { current: 2, ttl: 50_000 },
      { current: 3, ttl: 50_000 },
    ]);
    // Refused ones are not counted: however many, the next window starts
    // from 3. The 3 (taken as spread over this window) have slid out of the
    // last 60 s enough for one more 20 s into the next: 70 s from now.
    for (let i = 0; i < 5; i++) {
      expect(take(counts, 'tenant:a', 3)).toEqual({ current: 4, ttl: 70_000 });
    }
    // Another key has its own count.
    expect(take(counts, 'tenant:b', 3).current).toBe(1);

    // 1 ms into the next window, the 3 of the last one still count (in
    // proportion to the part of it within the last 60 s, rounded up): still refused.
    clock.at = T0 + WINDOW_MS + 1;
    expect(take(counts, 'tenant:a', 3)).toEqual({ current: 4, ttl: 19_999 });
    // A third of the way in, 3 × 2/3 = 2 remain: one more goes through.
    clock.at = T0 + WINDOW_MS + 20_000;
    expect(take(counts, 'tenant:a', 3)).toEqual({ current: 3, ttl: 40_000 });
    expect(take(counts, 'tenant:a', 3).current).toBe(4);
  });

  it('counts a request against every rule it passes, and against none when one refuses it', () => {
    const clock = { at: T0 + 30_000 };
    const { counts } = countsAt(clock);
    const tenant = { key: 'tenant:rules', max: 5 };
    const key = { key: 'key:rules', max: 2 };
    // Let through: the rule with the fewest left decides the headers.
    expect(counts.take([tenant, key])).toEqual({ rule: key, current: 1, ttl: 30_000 });
    expect(counts.take([tenant, key])).toEqual({ rule: key, current: 2, ttl: 30_000 });
    // The key's limit refuses: nothing more is counted against the tenant's.
    for (let i = 0; i < 3; i++) expect(counts.take([tenant, key]).rule).toBe(key);
    expect(take(counts, tenant.key, 5).current).toBe(3);
    // Another key of the tenant spends the rest, then the tenant's limit refuses both.
    const other = { key: 'key:other', max: 10 };
    expect(counts.take([tenant, other])).toEqual({ rule: tenant, current: 4, ttl: 30_000 });
    expect(counts.take([tenant, other]).current).toBe(5);
    const refused = counts.take([tenant, other]);
    expect(refused).toMatchObject({ rule: tenant, current: 6 });
    expect(take(counts, other.key, 10).current).toBe(3);
  });

  it('says how long the previous window takes to fade enough for one more', () => {
    const clock = { at: T0 + 59_000 };
    const { counts } = countsAt(clock);
    for (let i = 0; i < 2; i++) take(counts, 'tenant:fade', 4);
    // Into the next window by 6 s: 2 × 54/60 = 1.8 of the last 2 still count, rounded up 2.
    clock.at = T0 + WINDOW_MS + 6_000;
    expect([1, 2].map(() => take(counts, 'tenant:fade', 4).current)).toEqual([3, 4]);
    const refused = take(counts, 'tenant:fade', 4);
    expect(refused.current).toBe(5);
    // One more once 2 × (60 - t)/60 ≤ 1, t ≥ 30 s: 24 s from now.
    expect(refused.ttl).toBe(24_000);
    clock.at += refused.ttl - 1;
    expect(take(counts, 'tenant:fade', 4).current).toBe(5);
    clock.at += 1;
    expect(take(counts, 'tenant:fade', 4).current).toBe(4);
    expect(take(counts, 'tenant:fade', 4).current).toBe(5);
  });

  it('two replicas share their counts: once synced, each sees what the other let through', async () => {
    const clock = { at: T0 + 5_000 };
    const a = countsAt(clock);
    const b = countsAt(clock);
    const key = 'tenant:shared';
    expect([1, 2, 3].map(() => take(a.counts, key, 5).current)).toEqual([1, 2, 3]);
    expect([1, 2].map(() => take(b.counts, key, 5).current)).toEqual([1, 2]);
    await a.counts.sync();
    await b.counts.sync();
    // B read A's 3 with its own 2: the sum is spent.
    expect(take(b.counts, key, 5).current).toBe(6);
    // A has not synced since B added its 2: it still believes 3, lets one
    // through, and learns the sum at its next sync.
    expect(take(a.counts, key, 5).current).toBe(4);
    await a.counts.sync();
    expect(take(a.counts, key, 5).current).toBe(6);
    expect(a.syncs).toEqual(['ok', 'ok']);

    // A replica started later reads the previous window's sum with its
    // first sync, and keeps within what is left of the limit.
    clock.at = T0 + WINDOW_MS + 30_000;
    const late = countsAt(clock);
    expect(take(late.counts, key, 5).current).toBe(1);
    await late.counts.sync();
    // 6 × 30/60 = 3 of the last window, and its own 1: the next is the 5th.
    expect(take(late.counts, key, 5).current).toBe(5);
    expect(take(late.counts, key, 5).current).toBe(6);
  });

  it('a sync reads the sums of the keys counted here in the window, with nothing of their own to add', async () => {
    const clock = { at: T0 + 3 * WINDOW_MS + 1_000 };
    const a = countsAt(clock);
    const b = countsAt(clock);
    const key = 'tenant:read';
    expect(take(a.counts, key, 3).current).toBe(1);
    await a.counts.sync();
    expect([1, 2].map(() => take(b.counts, key, 3).current)).toEqual([1, 2]);
    await b.counts.sync();
    // A let nothing through since its sync: it reads B's 2 all the same.
    await a.counts.sync();
    expect(take(a.counts, key, 3).current).toBe(4);
  });

  it('a key new to a replica is synced at once, not a whole RATE_LIMIT_SYNC_MS later', async () => {
    const clock = { at: T0 + 5 * WINDOW_MS + 1_000 };
    const a = countsAt(clock);
    const b = countsAt(clock, { syncEveryMs: 60_000 });
    try {
      // B's syncs have begun (the first runs at once), and the next is a minute away.
      take(b.counts, 'tenant:b-only', 10);
      await vi.waitFor(() => expect(b.syncs).toEqual(['ok']));
      const key = 'tenant:soon';
      take(a.counts, key, 10);
      take(a.counts, key, 10);
      await a.counts.sync();
      // B's first request of the key goes by its own count; it syncs at once for the next.
      expect(take(b.counts, key, 10).current).toBe(1);
      await vi.waitFor(() => expect(b.syncs).toEqual(['ok', 'ok']));
      expect(take(b.counts, key, 10).current).toBe(4);
    } finally {
      await b.counts.close();
    }
  });

  it('two syncs asked at once add what was counted once', async () => {
    const clock = { at: T0 + 6 * WINDOW_MS + 1_000 };
    const { counts } = countsAt(clock);
    const key = 'tenant:twice';
    take(counts, key, 10);
    take(counts, key, 10);
    await Promise.all([counts.sync(), counts.sync()]);
    expect(await storedCount(key)).toBe(2);
    expect(take(counts, key, 10).current).toBe(3);
  });

  it('deletes the counts of windows no replica reads any more', async () => {
    const clock = { at: T0 + 7 * WINDOW_MS };
    const { counts } = countsAt(clock);
    take(counts, 'tenant:old', 10);
    await counts.sync();
    clock.at += WINDOW_MS;
    take(counts, 'tenant:old', 10);
    await counts.sync();
    const windowsOf = async () =>
      (
        await handle.db
          .selectFrom('rate_limit_counts')
          .select('window_start')
          .where('key', '=', 'tenant:old')
          .orderBy('window_start')
          .execute()
      ).map((row) => row.window_start.getTime());
    expect(await windowsOf()).toEqual([T0 + 7 * WINDOW_MS, T0 + 8 * WINDOW_MS]);
    clock.at += WINDOW_MS;
    take(counts, 'tenant:old', 10);
    await counts.sync();
    // The window before the current one is kept: its count still fades in.
    expect(await windowsOf()).toEqual([T0 + 8 * WINDOW_MS, T0 + 9 * WINDOW_MS]);
  });

  it('counts alone while the database cannot be reached, and adds what it counted once it can', async () => {
    const url = new URL(database.url);
    const proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
    const through = openDatabase({
      url: proxy.through(database.url),
      poolMax: 1,
      log: pino({ level: 'silent' }),
    });
    try {
      const clock = { at: T0 + 20 * WINDOW_MS };
      const syncs: string[] = [];
      const alone = createRateLimitCounts({
        windowMs: WINDOW_MS,
        syncEveryMs: 0,
        db: through.db,
        log: pino({ level: 'silent' }),
        onSync: (result) => syncs.push(result),
        now: () => clock.at,
      });
      const key = 'tenant:offline';
      await proxy.cut();
      expect([1, 2].map(() => take(alone, key, 3).current)).toEqual([1, 2]);
      await expect(alone.sync()).resolves.toBeUndefined();
      expect(take(alone, key, 3).current).toBe(3);
      expect(take(alone, key, 3).current).toBe(4);
      expect(syncs).toEqual(['failed']);

      await proxy.restore();
      await alone.sync();
      expect(syncs).toEqual(['failed', 'ok']);
      expect(await storedCount(key)).toBe(3);
    } finally {
      await proxy.restore().catch(() => undefined);
      await through.close();
      await proxy.close();
    }
  });
});
