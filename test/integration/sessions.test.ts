import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { sessionHelpers, type WireMessage } from '../support/sessions.js';
import { createSession, type TestTenant, useScriptedApp } from '../support/workflows.js';

/**
 * Sessions: created, read and paged through the API, and their messages
 * appended by the store. What workflows add to a session and the history
 * they get from it are in sessions-history.test.ts.
 */

const { app, newTenant } = useScriptedApp();
const { getSession, sessionMessages, appendExchange } = sessionHelpers(app);

function postSession(key: string, payload?: Record<string, unknown>) {
  return app().app.inject({
    method: 'POST',
    url: '/v1/sessions',
    headers: bearer(key),
    ...(payload === undefined ? {} : { payload }),
  });
}

describe('creating and reading a session', () => {
  it('answers 201 with the session and its Location; a GET returns it with no messages', async () => {
    const tenant = await newTenant('create session');
    const response = await postSession(tenant.key, {
      title: 'Quarterly numbers',
      metadata: { user: 'u-1', nested: { n: 1 } },
    });
    expect(response.statusCode, response.body).toBe(201);
    const created = response.json();
    expect(created).toEqual({
      id: expect.any(String),
      title: 'Quarterly numbers',
      metadata: { user: 'u-1', nested: { n: 1 } },
      model: null,
      lastSeq: 0,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      lastActivityAt: created.createdAt,
    });
    expect(response.headers.location).toBe(`/v1/sessions/${created.id}`);

    const read = await getSession(tenant.key, created.id);
    expect(read.statusCode).toBe(200);
    expect(read.json()).toEqual({ ...created, messages: [], nextAfter: null });
  });

  it('an empty object or no body at all makes an untitled session', async () => {
    const tenant = await newTenant('untitled session');
    for (const response of [await postSession(tenant.key, {}), await postSession(tenant.key)]) {
      expect(response.statusCode, response.body).toBe(201);
      expect(response.json()).toMatchObject({ title: null, metadata: {} });
    }
  });

  it.each([
    ['an empty title', { title: '' }],
    ['a title over 200 characters', { title: 'x'.repeat(201) }],
    ['a control character in the title', { title: 'a\u0007b' }],
    ['an unknown field', { name: 'chat' }],
    ['metadata over 16 KiB', { metadata: { blob: 'x'.repeat(16 * 1024) } }],
    ['a NUL in metadata', { metadata: { note: 'a\u0000b' } }],
    ['metadata that is not an object', { metadata: ['a'] }],
  ])('%s answers 400 validation_failed and leaves no row', async (_, payload) => {
    const tenant = await newTenant(`invalid session ${randomUUID()}`);
    const response = await postSession(tenant.key, payload);
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json().code).toBe('validation_failed');
    const { rows } = await app().services.database.pool.query(
      'SELECT 1 FROM sessions WHERE tenant_id = $1',
      [tenant.id],
    );
    expect(rows).toEqual([]);
  });

  it('another tenant’s session answers 404, like one that does not exist', async () => {
    const owner = await newTenant('session owner');
    const other = await newTenant('session stranger');
    const sessionId = await createSession(app(), owner.key);
    await appendExchange(owner, sessionId, 1);
    for (const response of [
      await getSession(other.key, sessionId),
      await getSession(owner.key, randomUUID()),
    ]) {
      expect(response.statusCode).toBe(404);
      expect(response.json().code).toBe('not_found');
    }
    expect((await getSession(owner.key, 'not-a-uuid')).statusCode).toBe(400);
  });
});

describe('paging the messages', () => {
  let tenant: TestTenant;
  let sessionId: string;
  beforeAll(async () => {
    tenant = await newTenant('paging');
    sessionId = await createSession(app(), tenant.key);
    for (let n = 1; n <= 5; n++) await appendExchange(tenant, sessionId, n);
  });

  it('pages oldest first with `after` and `limit` until nextAfter is null', async () => {
    const seen: WireMessage[] = [];
    const nextAfters: (number | null)[] = [];
    let after: number | null = 0;
    while (after !== null) {
      const response = await getSession(tenant.key, sessionId, `?after=${after}&limit=3`);
      expect(response.statusCode, response.body).toBe(200);
      const page = response.json() as { messages: WireMessage[]; nextAfter: number | null };
      seen.push(...page.messages);
      nextAfters.push(page.nextAfter);
      after = page.nextAfter;
    }
    expect(nextAfters).toEqual([3, 6, 9, null]);
    expect(seen.map((message) => message.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(seen.map((message) => message.content)).toEqual([
      'q1',
      'a1',
      'q2',
      'a2',
      'q3',
      'a3',
      'q4',
      'a4',
      'q5',
      'a5',
    ]);
    expect(seen.map((message) => message.role)).toEqual(
      Array.from({ length: 5 }, () => ['user', 'assistant']).flat(),
    );
  });

  it('a page that ends exactly at the last message says there is no next one', async () => {
    const response = await getSession(tenant.key, sessionId, '?after=5&limit=5');
    expect(response.json().messages.map((message: WireMessage) => message.seq)).toEqual([
      6, 7, 8, 9, 10,
    ]);
    expect(response.json().nextAfter).toBeNull();
    const beyond = await getSession(tenant.key, sessionId, '?after=10');
    expect(beyond.json()).toMatchObject({ messages: [], nextAfter: null, lastSeq: 10 });
  });

  it.each([
    ['limit=0'],
    ['limit=201'],
    ['after=-1'],
    ['after=x'],
    ['after=2147483648'],
    ['cursor=1'],
  ])('?%s answers 400', async (query) => {
    const response = await getSession(tenant.key, sessionId, `?${query}`);
    expect(response.statusCode).toBe(400);
  });
});

describe('appending', () => {
  it('a workflow’s question and answer are appended once, however often the append is repeated', async () => {
    const tenant = await newTenant('idempotent append');
    const id = await createSession(app(), tenant.key);
    const workflowId = randomUUID();
    expect(await appendExchange(tenant, id, 1, workflowId)).toBe(true);
    // The repeat appends nothing.
    expect(await appendExchange(tenant, id, 1, workflowId)).toBe(false);
    const messages = await sessionMessages(tenant.key, id);
    expect(messages).toEqual([
      expect.objectContaining({ seq: 1, role: 'user', content: 'q1', workflowId }),
      expect.objectContaining({ seq: 2, role: 'assistant', content: 'a1', workflowId }),
    ]);
    expect((await getSession(tenant.key, id)).json().lastSeq).toBe(2);
  });

  it('50 concurrent appends, some of them repeats, keep seqs gap-free and pairs adjacent', async () => {
    const tenant = await newTenant('concurrent append');
    const id = await createSession(app(), tenant.key);
    const workflowIds = Array.from({ length: 40 }, () => randomUUID());
    const repeats = workflowIds.slice(0, 10);
    await Promise.all(
      [...workflowIds, ...repeats].map((workflowId, index) =>
        appendExchange(tenant, id, index % 40, workflowId),
      ),
    );
    const messages = await sessionMessages(tenant.key, id);
    expect(messages.map((message) => message.seq)).toEqual(
      Array.from({ length: 80 }, (_, index) => index + 1),
    );
    for (let index = 0; index < messages.length; index += 2) {
      const [question, answer] = [messages[index], messages[index + 1]];
      expect(question?.role).toBe('user');
      expect(answer).toMatchObject({
        role: 'assistant',
        workflowId: question?.workflowId,
        content: question?.content.replace('q', 'a'),
      });
    }
    expect(new Set(messages.map((message) => message.workflowId))).toEqual(new Set(workflowIds));
    expect((await getSession(tenant.key, id)).json().lastSeq).toBe(80);
  });

  it('an append to a session that does not exist (or is another tenant’s) appends nothing', async () => {
    const owner = await newTenant('append owner');
    const other = await newTenant('append stranger');
    const id = await createSession(app(), owner.key);
    expect(await appendExchange(owner, randomUUID(), 1)).toBe(false);
    expect(await appendExchange(other, id, 1)).toBe(false);
    expect(await sessionMessages(owner.key, id)).toEqual([]);
  });
});
