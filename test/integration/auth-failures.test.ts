import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../../src/tenancy/issue.js';
import {
  bearer,
  listenLocally,
  startTestApp,
  startTestAppOn,
  type TestApp,
} from '../support/app.js';
import { bootstrapOperator, waitFor } from '../support/workflows.js';

/**
 * AUTH_FAILURE_LIMIT (src/http/auth-failures.ts) over real sockets: a
 * client address that has sent that many unknown or revoked keys gets 429
 * for keys the replica has not found active before, without reading them,
 * until its window ends; keys it knows, other addresses and malformed keys
 * (never read) are not held up. A key is known to every replica from its
 * issue on (its NOTIFY). The principal cache is off
 * (AUTH_CACHE_TTL_MS=0), so every request of a known key is read as one
 * whose cache entry has expired is. Addresses come from X-Forwarded-For
 * (TRUST_PROXY), as behind a load balancer.
 */

const LIMIT = 3;
/** Long enough that a slow machine still sends a test's few requests within one window. */
const WINDOW_MS = 3000;

let testApp: TestApp;
let base: string;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp({
    AUTH_FAILURE_LIMIT: String(LIMIT),
    AUTH_FAILURE_WINDOW_MS: String(WINDOW_MS),
    AUTH_CACHE_TTL_MS: '0',
    TRUST_PROXY: 'true',
  });
  operatorKey = await bootstrapOperator(testApp);
  base = (await listenLocally(testApp.app)).url;
});
afterAll(async () => testApp?.close());

/** A well-formed key no tenant has. */
function unknownKey(): string {
  return `wmk_${randomBytes(32).toString('base64url')}`;
}

function me(key: string, from: string, on = base): Promise<Response> {
  return fetch(`${on}/v1/me`, { headers: { ...bearer(key), 'x-forwarded-for': from } });
}

/** The API key lookups this replica counted, by result. */
async function lookups(): Promise<Record<'found' | 'unknown' | 'refused', number>> {
  const response = await fetch(`${base}/metrics`, { headers: bearer(operatorKey) });
  expect(response.status).toBe(200);
  const counts = { found: 0, unknown: 0, refused: 0 };
  for (const match of (await response.text()).matchAll(
    /^waymark_api_key_lookups_total\{result="(\w+)"\} (\d+)$/gm,
  )) {
    counts[match[1] as keyof typeof counts] = Number(match[2]);
  }
  return counts;
}

/** A new key of the operator tenant, issued through the API (so known to every replica) and not used yet. */
async function freshKey(): Promise<string> {
  const response = await fetch(`${base}/v1/api-keys`, {
    method: 'POST',
    headers: { ...bearer(operatorKey), 'content-type': 'application/json' },
    body: JSON.stringify({ name: `fresh ${randomBytes(4).toString('hex')}` }),
  });
  expect(response.status).toBe(201);
  return ((await response.json()) as { key: string }).key;
}

describe('failed authentications per client address', () => {
  it('past the limit, an address gets 429 without a query for keys this replica has not found before, until its window ends; a known key is still read and passes', async () => {
    const address = '203.0.113.7';
    const known = await freshKey();
    // Used once (from anywhere) before the address fails: from now on known to this replica.
    expect((await me(known, '192.0.2.50')).status).toBe(200);
    // Written with no announcement: this replica has not heard of it.
    const waiting = await unannouncedKey();
    // Issued here through the API: known from its issue on, though never used.
    const issued = await freshKey();
    const before = await lookups();

    for (let attempt = 0; attempt < LIMIT; attempt += 1) {
      const refused = await me(unknownKey(), address);
      expect(refused.status).toBe(401);
      expect(((await refused.json()) as { code: string }).code).toBe('invalid_api_key');
    }
    const spent = await me(unknownKey(), address);
    expect(spent.status).toBe(429);
    expect(spent.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const retryAfter = Number(spent.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(WINDOW_MS / 1000);
    expect(await spent.json()).toMatchObject({ code: 'auth_failures_exceeded', status: 429 });
    // A valid key this replica has not found yet is refused too: reading it is what is bounded.
    expect((await me(waiting, address)).status).toBe(429);
    // The keys it knows are read (the cache is off) and pass.
    expect((await me(known, address)).status).toBe(200);
    expect((await me(issued, address)).status).toBe(200);
    // A malformed key is never read: 401 as always.
    expect((await me('wmk_short', address)).status).toBe(401);

    const after = await lookups();
    expect(after.unknown - before.unknown).toBe(LIMIT);
    expect(after.refused - before.refused).toBe(2);
    // The known keys' reads, and the scrape's own before it.
    expect(after.found - before.found).toBe(3);

    // Once the window has ended (Retry-After rounds up), the address is read from again.
    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 50));
    expect((await me(waiting, address)).status).toBe(200);
  });

  it('one address spending its failures leaves other addresses theirs; an IPv6 client counts by its /64', async () => {
    for (let attempt = 0; attempt < LIMIT; attempt += 1) {
      // Each from another host of one /64.
      expect((await me(unknownKey(), `2001:db8:0:7::${attempt + 1}`)).status).toBe(401);
    }
    expect((await me(unknownKey(), '2001:db8:0:7:ffff::1')).status).toBe(429);
    // Another /64, and an IPv4 client: their own counts.
    expect((await me(unknownKey(), '2001:db8:0:8::1')).status).toBe(401);
    expect((await me(await freshKey(), '198.51.100.20')).status).toBe(200);
    expect((await me(unknownKey(), '198.51.100.20')).status).toBe(401);
  });

  it('a key issued on another replica is known here from its commit: past the limit it passes before this replica has read it; a key written without the announcement does not', async () => {
    // A window longer than the test: a key passing is the announcement, never the window's end.
    const other = await startTestAppOn(testApp.database, {
      AUTH_FAILURE_LIMIT: String(LIMIT),
      AUTH_FAILURE_WINDOW_MS: '600000',
      AUTH_CACHE_TTL_MS: '0',
      TRUST_PROXY: 'true',
    });
    try {
      const otherBase = (await listenLocally(other.app)).url;
      const address = '203.0.113.120';
      for (let attempt = 0; attempt < LIMIT; attempt += 1) {
        expect((await me(unknownKey(), address, otherBase)).status).toBe(401);
      }
      expect((await me(unknownKey(), address, otherBase)).status).toBe(429);
      const unannounced = await unannouncedKey();
      // Issued through the first replica's API: the other hears of it by NOTIFY.
      const issued = await freshKey();
      await waitFor(
        async () => ((await me(issued, address, otherBase)).status === 200 ? true : undefined),
        'the other replica to know the key issued on the first',
      );
      // Its announcement came after the unannounced key was written: still unknown there.
      expect((await me(unannounced, address, otherBase)).status).toBe(429);
    } finally {
      await other.close();
    }
  });

  it('a replica just started knows the keys active when it read them: past the limit they still pass there, a key revoked before is refused unread', async () => {
    const active = await freshKey();
    const revoked = await freshKey();
    const revokedId = await keyIdOf(revoked);
    const revoke = await fetch(`${base}/v1/api-keys/${revokedId}`, {
      method: 'DELETE',
      headers: bearer(operatorKey),
    });
    expect(revoke.status).toBe(204);

    const started = await startTestAppOn(testApp.database, {
      AUTH_FAILURE_LIMIT: String(LIMIT),
      AUTH_FAILURE_WINDOW_MS: String(WINDOW_MS),
      AUTH_CACHE_TTL_MS: '0',
      TRUST_PROXY: 'true',
    });
    try {
      // At least the operator's keys issued by these tests; none revoked.
      expect(await started.services.tenancy.loadKnownKeys()).toBeGreaterThanOrEqual(2);
      const startedBase = (await listenLocally(started.app)).url;
      const address = '203.0.113.99';
      for (let attempt = 0; attempt < LIMIT; attempt += 1) {
        expect((await me(unknownKey(), address, startedBase)).status).toBe(401);
      }
      expect((await me(unknownKey(), address, startedBase)).status).toBe(429);
      // Never used on this replica, but active when it read the keys: read, and passes.
      expect((await me(active, address, startedBase)).status).toBe(200);
      // Revoked before: not among them, so refused without a read.
      expect((await me(revoked, address, startedBase)).status).toBe(429);
    } finally {
      await started.close();
    }
  });
});

/**
 * A new key of the operator tenant written as the store's row alone, with no
 * announcement: as a replica that was not listening would miss a key's.
 */
async function unannouncedKey(): Promise<string> {
  const response = await me(operatorKey, '192.0.2.52');
  expect(response.status).toBe(200);
  const { tenant } = (await response.json()) as { tenant: { id: string } };
  const issued = await issueKey(testApp.services.database.db, tenant.id, {
    name: `unannounced ${randomBytes(4).toString('hex')}`,
    scopes: ['admin'],
  });
  return issued.secret;
}

/** The id of the operator tenant's key `key` (its /v1/me). */
async function keyIdOf(key: string): Promise<string> {
  const response = await me(key, '192.0.2.51');
  expect(response.status).toBe(200);
  return ((await response.json()) as { apiKey: { id: string } }).apiKey.id;
}
