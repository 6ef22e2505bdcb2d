import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { sessionsRepository } from '../../src/store/sessions.js';
import { bearer, listenLocally } from '../support/app.js';
import { type TestTenant, useScriptedApp, waitFor } from '../support/workflows.js';

/**
 * `GET /v1/sessions?order=activity` over real HTTP: sessions newest first
 * by their last message (their creation while they have none), keyset
 * paged by (time, id) through ties, with `metadata`; a cursor continues
 * only the order it came from. Every session carries `lastActivityAt`.
 */

const { app, newTenant } = useScriptedApp();
let base = '';

beforeAll(async () => {
  base = (await listenLocally(app().app)).url;
});

interface WireSession {
  id: string;
  title: string | null;
  createdAt: string;
  updatedAt: string;
  lastActivityAt: string;
}

interface WirePage {
  items: WireSession[];
  nextCursor: string | null;
}

async function call(
  tenant: TestTenant,
  method: 'GET' | 'POST' | 'PATCH',
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...bearer(tenant.key),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function newSession(tenant: TestTenant, payload: Record<string, unknown> = {}) {
  const created = await call(tenant, 'POST', '/v1/sessions', payload);
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return created.body as unknown as WireSession;
}

/** A workflow of the session that completed: its question and answer appended. */
async function talkIn(tenant: TestTenant, sessionId: string, input: string): Promise<void> {
  const created = await call(tenant, 'POST', '/v1/workflows', { input, sessionId, mode: 'simple' });
  expect(created.status, JSON.stringify(created.body)).toBe(202);
  const id = created.body.id as string;
  await waitFor(async () => {
    const read = await call(tenant, 'GET', `/v1/workflows/${id}`);
    return read.body.status === 'completed' ? true : undefined;
  }, `workflow ${id} to complete`);
}

async function list(tenant: TestTenant, query: string): Promise<WirePage> {
  const listed = await call(tenant, 'GET', `/v1/sessions?${query}`);
  expect(listed.status, JSON.stringify(listed.body)).toBe(200);
  return listed.body as unknown as WirePage;
}

/** Every page of the list, `limit` at a time: the ids in the order read. */
async function everyPage(tenant: TestTenant, query: string, limit: number): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const after: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const page = await list(tenant, `${query}&limit=${limit}${after}`);
    expect(page.items.length).toBeLessThanOrEqual(limit);
    ids.push(...page.items.map((session) => session.id));
    cursor = page.nextCursor;
  } while (cursor);
  return ids;
}

const ids = (page: WirePage) => page.items.map((session) => session.id);

describe('GET /v1/sessions?order=activity', () => {
  it('lists the session talked in last first, one without messages by its creation; order=created is unchanged', async () => {
    const tenant = await newTenant('sessions by activity');
    const [a, b, c] = [
      await newSession(tenant, { title: 'a' }),
      await newSession(tenant, { title: 'b' }),
      await newSession(tenant, { title: 'c' }),
    ];
    if (!a || !b || !c) throw new Error('three sessions');
    expect(a.lastActivityAt).toBe(a.createdAt);

    await talkIn(tenant, b.id, 'first in b');
    await talkIn(tenant, a.id, 'first in a');
    expect(ids(await list(tenant, 'order=activity'))).toEqual([a.id, b.id, c.id]);
    expect(ids(await list(tenant, 'order=created'))).toEqual([c.id, b.id, a.id]);
    expect(ids(await list(tenant, ''))).toEqual([c.id, b.id, a.id]);

    await talkIn(tenant, b.id, 'again in b');
    const byActivity = await list(tenant, 'order=activity');
    expect(ids(byActivity)).toEqual([b.id, a.id, c.id]);

    // Its last message's time, in either order; a session without messages: its creation.
    const read = await call(tenant, 'GET', `/v1/sessions/${b.id}`);
    const messages = read.body.messages as { createdAt: string }[];
    expect(messages).toHaveLength(4);
    const [listedB, , listedC] = byActivity.items;
    expect(listedB?.lastActivityAt).toBe(messages.at(-1)?.createdAt);
    expect(read.body.lastActivityAt).toBe(listedB?.lastActivityAt);
    expect(listedC?.lastActivityAt).toBe(c.createdAt);
    const byCreation = await list(tenant, 'order=created');
    expect(byCreation.items.find((session) => session.id === b.id)).toEqual(listedB);
  });

  it('an exchange whose transaction began first but committed last never moves lastActivityAt back', async () => {
    const tenant = await newTenant('sessions by activity, commit order');
    const session = await newSession(tenant);
    const exchange = (n: number) => ({
      tenantId: tenant.id,
      sessionId: session.id,
      workflowId: randomUUID(),
      question: `q${n}`,
      answer: `a${n}`,
    });
    const { db } = app().services.database;
    await db.transaction().execute(async (tx) => {
      // The transaction's now(), which its append writes, is taken here...
      await sql`SELECT now()`.execute(tx);
      await new Promise((resolve) => setTimeout(resolve, 20));
      // ...before another exchange's, which commits first...
      expect(await sessionsRepository(db).appendExchange(exchange(1))).toHaveLength(2);
      // ...and this one is appended after it, at an earlier time.
      expect(await sessionsRepository(tx).appendExchange(exchange(2))).toHaveLength(2);
    });

    const read = await call(tenant, 'GET', `/v1/sessions/${session.id}`);
    const times = (read.body.messages as { seq: number; createdAt: string }[]).map((message) =>
      Date.parse(message.createdAt),
    );
    expect(times).toHaveLength(4);
    // The later exchange's messages (seqs 3 and 4) carry the earlier time.
    expect(times[2]).toBeLessThan(times[0] ?? 0);
    // The session's activity is its latest message's time, not its last-appended one's.
    expect(Date.parse(read.body.lastActivityAt as string)).toBe(Math.max(...times));
  });

  it('a PATCH is no activity: the session keeps its place and its lastActivityAt', async () => {
    const tenant = await newTenant('sessions by activity, patched');
    const older = await newSession(tenant, { title: 'older' });
    const newer = await newSession(tenant, { title: 'newer' });
    await talkIn(tenant, newer.id, 'in newer');

    const patched = await call(tenant, 'PATCH', `/v1/sessions/${older.id}`, { title: 'renamed' });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body.lastActivityAt).toBe(older.lastActivityAt);
    expect(Date.parse(patched.body.updatedAt as string)).toBeGreaterThanOrEqual(
      Date.parse(older.updatedAt),
    );
    const page = await list(tenant, 'order=activity');
    expect(ids(page)).toEqual([newer.id, older.id]);
    expect(page.items[1]).toMatchObject({ title: 'renamed', lastActivityAt: older.lastActivityAt });
  });

  it('pages through sessions whose activity ties, to the microsecond, by (time, id): each once, in order', async () => {
    const tenant = await newTenant('sessions by activity, ties');
    const sessions: string[] = [];
    for (let i = 0; i < 8; i += 1) sessions.push((await newSession(tenant)).id);
    const [latest, sameMillisecond, earliest, ...tied] = sessions;
    if (!latest || !sameMillisecond || !earliest) throw new Error('eight sessions');
    // Ties the API cannot make on demand: five sessions at one instant, one a microsecond later.
    const at = async (id: string, time: string) => {
      await app().services.database.pool.query(
        'UPDATE sessions SET last_activity_at = $2 WHERE id = $1',
        [id, time],
      );
    };
    for (const id of tied) await at(id, '2030-01-01 00:00:00.123456+00');
    await at(sameMillisecond, '2030-01-01 00:00:00.123457+00');
    await at(latest, '2030-01-01 00:00:01+00');
    await at(earliest, '2029-12-31 23:59:59+00');

    const expected = [latest, sameMillisecond, ...[...tied].sort().reverse(), earliest];
    for (const limit of [1, 2, 3, 5]) {
      expect(await everyPage(tenant, 'order=activity', limit), `limit ${limit}`).toEqual(expected);
    }
    const first = await list(tenant, 'order=activity&limit=3');
    expect(first.items.map((session) => session.lastActivityAt)).toEqual([
      '2030-01-01T00:00:01.000Z',
      '2030-01-01T00:00:00.123Z',
      '2030-01-01T00:00:00.123Z',
    ]);
  });

  it('a session talked in while a client pages moves to the first page, and the later pages do not repeat it', async () => {
    const tenant = await newTenant('sessions by activity, moving');
    const a = await newSession(tenant);
    const b = await newSession(tenant);
    const c = await newSession(tenant);
    const first = await list(tenant, 'order=activity&limit=1');
    expect(ids(first)).toEqual([c.id]);

    await talkIn(tenant, a.id, 'in a, meanwhile');
    const rest = await list(
      tenant,
      `order=activity&limit=5&cursor=${encodeURIComponent(first.nextCursor ?? '')}`,
    );
    expect(rest).toEqual({ items: [expect.objectContaining({ id: b.id })], nextCursor: null });
    expect(ids(await list(tenant, 'order=activity&limit=1'))).toEqual([a.id]);
  });

  it('with metadata: only the sessions whose metadata contains it, by last activity, paged', async () => {
    const tenant = await newTenant('sessions by activity and metadata');
    const first = await newSession(tenant, { metadata: { user: 'u-1', topic: 'tax' } });
    const second = await newSession(tenant, { metadata: { user: 'u-1', topic: 'travel' } });
    const third = await newSession(tenant, { metadata: { user: 'u-1', topic: 'tax' } });
    const theirs = await newSession(tenant, { metadata: { user: 'u-2' } });
    await talkIn(tenant, first.id, 'u-1 on tax');
    await talkIn(tenant, theirs.id, 'u-2');
    await talkIn(tenant, second.id, 'u-1 on travel');

    const metadata = (filter: unknown) =>
      `order=activity&metadata=${encodeURIComponent(JSON.stringify(filter))}`;
    expect(await everyPage(tenant, metadata({ user: 'u-1' }), 2)).toEqual([
      second.id,
      first.id,
      third.id,
    ]);
    expect(await everyPage(tenant, metadata({ user: 'u-1', topic: 'tax' }), 1)).toEqual([
      first.id,
      third.id,
    ]);
    expect(ids(await list(tenant, metadata({ user: 'u-2' })))).toEqual([theirs.id]);
    // The same filter by creation, for contrast.
    const created = `metadata=${encodeURIComponent(JSON.stringify({ user: 'u-1' }))}`;
    expect(await everyPage(tenant, created, 2)).toEqual([third.id, second.id, first.id]);
  });
});

describe('cursors and orders', () => {
  async function cursorOf(tenant: TestTenant, order: string): Promise<string> {
    const page = await list(tenant, `order=${order}&limit=1`);
    if (!page.nextCursor) throw new Error(`no next page in order=${order}`);
    return encodeURIComponent(page.nextCursor);
  }

  it.each([
    ['created', 'activity'],
    ['activity', 'created'],
  ])('a cursor of order=%s with order=%s: 400 cursor_order_mismatch', async (from, to) => {
    const tenant = await newTenant(`cursor of ${from} with ${to}`);
    await newSession(tenant);
    await newSession(tenant);
    const cursor = await cursorOf(tenant, from);
    const refused = await call(tenant, 'GET', `/v1/sessions?order=${to}&cursor=${cursor}`);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({
      code: 'cursor_order_mismatch',
      errors: [expect.objectContaining({ field: 'query.cursor' })],
    });
    // The order it came from still takes it.
    const continued = await call(tenant, 'GET', `/v1/sessions?order=${from}&cursor=${cursor}`);
    expect(continued.status, JSON.stringify(continued.body)).toBe(200);
  });

  it('an activity cursor on the workflows list is one it never returned: 400 invalid_cursor', async () => {
    const tenant = await newTenant('activity cursor on workflows');
    await newSession(tenant);
    await newSession(tenant);
    const cursor = await cursorOf(tenant, 'activity');
    const refused = await call(tenant, 'GET', `/v1/workflows?cursor=${cursor}`);
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe('invalid_cursor');
  });

  it('an order it does not know: 400 validation_failed', async () => {
    const tenant = await newTenant('unknown order');
    const refused = await call(tenant, 'GET', '/v1/sessions?order=updated');
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe('validation_failed');
  });
});
