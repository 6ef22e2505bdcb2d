import type { Logger } from 'pino';
import { createPeriodicTask } from '../periodic.js';
import type { Db } from '../store/database.js';
import {
  type CountedSince,
  rateLimitCountsRepository,
  type SharedCount,
} from '../store/rate-limit-counts.js';

export interface RateLimitCountsOptions {
  windowMs: number;
  /** 0: the counts stay this replica's own. */
  syncEveryMs: number;
  db: Db;
  log: Logger;
  onSync?: (result: 'ok' | 'failed') => void;
  now?: () => number;
}

/** A limit a request counts against: `max` requests per window of `key` (a tenant, an API key). */
export interface RateLimitRule {
  key: string;
  max: number;
}

/** A request's standing against the limit that decided it. */
export interface Taken {
  /** Refused: the rule that refused it (the longest wait of those that did); else the one with the fewest left. */
  rule: RateLimitRule;
  /** Over `rule.max`: refused. Else the estimate with this request, so `rule.max - current` remain. */
  current: number;
  /** Refused: milliseconds until a request would be let through; else until the window ends. */
  ttl: number;
}

interface KeyCounts {
  /** Index of the window counted (its start over `windowMs`). */
  window: number;
  /** Let through in it: the sum read at the last sync, and what this replica let through since. */
  count: number;
  /** Of `count`, what this replica has not added to the shared count yet. */
  unsynced: number;
  /** The previous window's count. */
  previous: number;
}

/**
 * The rate limit's counts (README "Rate limits"): requests let through
 * per key (a tenant, an API key) in windows of `windowMs` aligned on the
 * clock, so that every replica counts in the same windows.
 *
 * A request is let through while each of its keys' estimate for the last
 * `windowMs`, with it, stays within that key's `max`: the count of the
 * current window plus the previous window's count in proportion to the
 * part of it still within the last `windowMs`, rounded up (a sliding
 * window, so a client cannot spend its limit twice across a window's
 * end). A refused request is not counted: a client retrying while refused
 * does not push its refusal on.
 *
 * With `syncEveryMs`, counting stays in memory (no query per request) and
 * every `syncEveryMs` the replica adds what it let through to the counts
 * in PostgreSQL and reads back the sums of every replica. A replica sees
 * the others' requests that late: a burst reaching several replicas within
 * one sync may pass `max` by what they let through meanwhile, and that
 * excess is counted, so taken from what follows. While the database cannot
 * be reached, each replica goes on with its own counts.
 */
export function createRateLimitCounts(options: RateLimitCountsOptions) {
  const { windowMs } = options;
  const now = options.now ?? Date.now;
  const repository = rateLimitCountsRepository(options.db);
  const keys = new Map<string, KeyCounts>();
  let failing = false;
  let sweptWindow = -1;
  let forgottenWindow = -1;
  /** The sync in progress, or the last one (never rejects: failures are logged and counted). */
  let syncing: Promise<void> = Promise.resolve();
  const periodic =
    options.syncEveryMs > 0
      ? createPeriodicTask({
          intervalMs: options.syncEveryMs,
          run: sync,
          log: options.log,
          failureMessage: 'sharing the rate-limit counts failed',
        })
      : undefined;

  /** The key's counts, moved on to `window` when theirs is past. */
  function countsOf(key: string, window: number): KeyCounts {
    let counts = keys.get(key);
    if (!counts) {
      counts = { window, count: 0, unsynced: 0, previous: 0 };
      keys.set(key, counts);
      // New here: this request goes by this replica's count alone, the next
      // ones by every replica's once this sync has read them.
      periodic?.soon();
    } else if (counts.window !== window) {
      counts.previous = counts.window === window - 1 ? counts.count : 0;
      counts.window = window;
      counts.count = 0;
      counts.unsynced = 0;
    }
    return counts;
  }

  /**
   * Counts a request against every rule when each lets it through, and
   * against none when one refuses it: a request refused by its key's limit
   * spends nothing of its tenant's.
   */
  function take(rules: readonly [RateLimitRule, ...RateLimitRule[]]): Taken {
    periodic?.start();
    const at = now();
    const window = Math.floor(at / windowMs);
    forgetPast(window);
    const intoWindow = at - window * windowMs;
    const standings = rules.map((rule) => {
      const counts = countsOf(rule.key, window);
      const fromPrevious = Math.ceil((counts.previous * (windowMs - intoWindow)) / windowMs);
      return { rule, counts, current: fromPrevious + counts.count + 1 };
    });
    let refused: Taken | undefined;
    for (const { rule, counts, current } of standings) {
      if (current <= rule.max) continue;
      const ttl = waitMs(counts, rule.max, intoWindow);
      if (!refused || ttl > refused.ttl) refused = { rule, current: rule.max + 1, ttl };
    }
    if (refused) return refused;
    const taken = standings.map(({ rule, counts, current }): Taken => {
      counts.count += 1;
      counts.unsynced += 1;
      return { rule, current, ttl: windowMs - intoWindow };
    });
    return taken.reduce((tightest, each) =>
      each.rule.max - each.current < tightest.rule.max - tightest.current ? each : tightest,
    );
  }

  /**
   * How long until the estimate lets one more through, the counts as they
   * are (the previous window's requests taken as spread evenly over it):
   * until enough of the previous window has slid out of the last
   * `windowMs`, or, when this window's count alone is at `max`, into the
   * next window until enough of this one has. At least 1 ms; up to two
   * windows for a `max` of 1.
   */
  function waitMs(counts: KeyCounts, max: number, intoWindow: number): number {
    // ceil(n × (windowMs - t) / windowMs) ≤ room once t ≥ windowMs × (1 - room / n).
    const slidOut = (n: number, room: number) => (windowMs * (n - room)) / n;
    const wait =
      counts.count + 1 > max
        ? windowMs - intoWindow + slidOut(counts.count, max - 1)
        : slidOut(counts.previous, max - counts.count - 1) - intoWindow;
    return Math.max(1, Math.ceil(wait));
  }

  /**
   * Adds what this replica let through to the shared counts and reads back
   * their sums, after any sync in progress: two at once would both add
   * what neither had added yet.
   */
  function sync(): Promise<void> {
    const next = syncing.then(syncNow);
    syncing = next;
    return next;
  }

  async function syncNow(): Promise<void> {
    const window = Math.floor(now() / windowMs);
    const start = new Date(window * windowMs);
    forgetPast(window);
    // Every key counted in this window: what was let through here since
    // the last sync is added, and the sums of all are read back, so that a
    // key's next request here is decided on the others' counts of at most
    // one sync ago.
    const sent = new Map<string, number>();
    for (const [key, counts] of keys) {
      if (counts.window === window) sent.set(key, counts.unsynced);
    }
    if (sent.size > 0 && !(await share(window, start, sent))) return;
    if (sweptWindow === window) return;
    sweptWindow = window;
    await repository
      .deletePast({ ms: windowMs, start })
      .catch((error: unknown) =>
        options.log.warn({ err: error }, 'deleting past rate-limit counts failed'),
      );
  }

  /** Adds `sent` to the window's shared counts and takes their sums; false when that failed. */
  async function share(window: number, start: Date, sent: Map<string, number>): Promise<boolean> {
    const counted: CountedSince[] = [...sent].map(([key, count]) => ({ key, count }));
    let shared: SharedCount[];
    try {
      shared = await repository.add({ ms: windowMs, start }, counted);
    } catch (error) {
      // Still counted here: added with the next sync of this window.
      if (!failing) {
        options.log.warn(
          { err: error },
          'sharing the rate-limit counts failed; this replica counts alone until it succeeds',
        );
      }
      failing = true;
      options.onSync?.('failed');
      return false;
    }
    for (const { key, count, previous } of shared) {
      const counts = keys.get(key);
      if (!counts || counts.window !== window) continue;
      counts.unsynced -= sent.get(key) ?? 0;
      counts.count = count + counts.unsynced;
      if (previous !== null) counts.previous = Math.max(counts.previous, previous);
    }
    if (failing) options.log.info('the rate-limit counts are shared again');
    failing = false;
    options.onSync?.('ok');
    return true;
  }

  /** Once per window: drops the keys counted in none of the last two windows (memory stays bounded by the keys in use). */
  function forgetPast(window: number): void {
    if (forgottenWindow === window) return;
    forgottenWindow = window;
    for (const [key, counts] of keys) if (counts.window < window - 1) keys.delete(key);
  }

  return {
    take,
    /** Syncs now (tests; shutdown). */
    sync,
    /** Stops syncing, after adding what is still counted here only, so that the other replicas see it. */
    async close(): Promise<void> {
      if (!periodic) return;
      await periodic.stop();
      if (keys.size > 0) await sync();
    },
  };
}

export type RateLimitCounts = ReturnType<typeof createRateLimitCounts>;
