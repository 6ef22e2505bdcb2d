import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  cancelWorkflow,
  countWorkflows,
  createTenant,
  postWorkflow,
  scriptedCatalogue,
  startWorkflow,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

let testApp: TestApp;
let operatorKey: string;

beforeAll(async () => {
  testApp = await startTestApp({ WAYMARK_MODELS: scriptedCatalogue(), RATE_LIMIT_MAX: '100000' });
  operatorKey = await bootstrapOperator(testApp);
});
afterAll(async () => testApp?.close());

const newTenant = (name: string) => createTenant(testApp, operatorKey, { name });

function postSession(key: string, payload?: Record<string, unknown>) {
  return testApp.app.inject({
    method: 'POST',
    url: '/v1/sessions',
    headers: bearer(key),
    ...(payload === undefined ? {} : { payload }),
  });
}

async function createSession(key: string, payload: Record<string, unknown> = {}) {
  const response = await postSession(key, payload);
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as { id: string; lastSeq: number };
}

function getSession(key: string, id: string, query = '') {
  return testApp.app.inject({
    method: 'GET',
    url: `/v1/sessions/${id}${query}`,
    headers: bearer(key),
  });
}

interface WireMessage {
  seq: number;
  role: string;
  content: string;
  workflowId: string | null;
}

async function sessionMessages(key: string, id: string): Promise<WireMessage[]> {
  const response = await getSession(key, id, '?limit=200');
  expect(response.statusCode, response.body).toBe(200);
  return response.json().messages;
}

/** Appends question `q<n>` and answer `a<n>` of a made-up workflow id. */
function appendExchange(
  tenant: TestTenant,
  sessionId: string,
  n: number,
  workflowId = randomUUID(),
) {
  return testApp.services.sessions.appendExchange({
    tenantId: tenant.id,
    sessionId,
    workflowId,
    question: `q${n}`,
    answer: `a${n}`,
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
      lastSeq: 0,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
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
    const { rows } = await testApp.services.database.pool.query(
      'SELECT 1 FROM sessions WHERE tenant_id = $1',
      [tenant.id],
    );
    expect(rows).toEqual([]);
  });

  it('another tenant’s session answers 404, like one that does not exist', async () => {
    const owner = await newTenant('session owner');
    const other = await newTenant('session stranger');
    const session = await createSession(owner.key);
    await appendExchange(owner, session.id, 1);
    for (const response of [
      await getSession(other.key, session.id),
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
    sessionId = (await createSession(tenant.key)).id;
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
    const { id } = await createSession(tenant.key);
    const workflowId = randomUUID();
    expect(await appendExchange(tenant, id, 1, workflowId)).toBe(true);
    expect(await appendExchange(tenant, id, 1, workflowId)).toBe(true);
    const messages = await sessionMessages(tenant.key, id);
    expect(messages).toEqual([
      expect.objectContaining({ seq: 1, role: 'user', content: 'q1', workflowId }),
      expect.objectContaining({ seq: 2, role: 'assistant', content: 'a1', workflowId }),
    ]);
    expect((await getSession(tenant.key, id)).json().lastSeq).toBe(2);
  });

  it('50 concurrent appends, some of them repeats, keep seqs gap-free and pairs adjacent', async () => {
    const tenant = await newTenant('concurrent append');
    const { id } = await createSession(tenant.key);
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
    const { id } = await createSession(owner.key);
    expect(await appendExchange(owner, randomUUID(), 1)).toBe(false);
    expect(await appendExchange(other, id, 1)).toBe(false);
    expect(await sessionMessages(owner.key, id)).toEqual([]);
  });
});

describe('workflows in a session', () => {
  it.each([
    ['a session that does not exist', () => randomUUID()],
    ['a sessionId that is no uuid', () => 'chat-1'],
  ])('%s: 400 unknown_session and no workflow row', async (_, sessionId) => {
    const tenant = await newTenant(`unknown session ${randomUUID()}`);
    const response = await postWorkflow(
      testApp,
      tenant.key,
      { input: 'hi', sessionId: sessionId() },
      { 'idempotency-key': 'unknown-session' },
    );
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json()).toMatchObject({
      code: 'unknown_session',
      errors: [{ field: 'body.sessionId' }],
    });
    expect(await countWorkflows(testApp, tenant.id)).toBe(0);
    // The key of the refused request is still free.
    expect(
      (
        await postWorkflow(
          testApp,
          tenant.key,
          { input: 'hi' },
          { 'idempotency-key': 'unknown-session' },
        )
      ).statusCode,
    ).toBe(202);
  });

  it('another tenant’s session: 400 unknown_session and no workflow row', async () => {
    const owner = await newTenant('workflow session owner');
    const other = await newTenant('workflow session stranger');
    const { id } = await createSession(owner.key);
    const response = await postWorkflow(testApp, other.key, { input: 'hi', sessionId: id });
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('unknown_session');
    expect(await countWorkflows(testApp, other.id)).toBe(0);
  });

  it('a completed workflow’s question and answer are in its session, visible as soon as it is completed', async () => {
    const tenant = await newTenant('completed into session');
    const { id } = await createSession(tenant.key);
    const first = await startWorkflow(testApp, tenant.key, {
      input: 'First question',
      sessionId: id,
    });
    const done = await waitForStatus(testApp, tenant.key, first, ['completed', 'failed']);
    expect(done.status).toBe('completed');
    // Appended in the completion's transaction: no wait beyond the status.
    expect(await sessionMessages(tenant.key, id)).toEqual([
      expect.objectContaining({
        seq: 1,
        role: 'user',
        content: 'First question',
        workflowId: first,
      }),
      expect.objectContaining({
        seq: 2,
        role: 'assistant',
        content: (done.result as { answer: string }).answer,
        workflowId: first,
      }),
    ]);

    const second = await startWorkflow(testApp, tenant.key, {
      input: 'Second question',
      sessionId: id,
    });
    await waitForStatus(testApp, tenant.key, second, ['completed']);
    const messages = await sessionMessages(tenant.key, id);
    expect(
      messages.map((message) => [message.seq, message.content.slice(0, 15), message.workflowId]),
    ).toEqual([
      [1, 'First question', first],
      [2, expect.any(String), first],
      [3, 'Second question', second],
      [4, expect.any(String), second],
    ]);
  });

  it('a cancelled workflow adds nothing to its session', async () => {
    const tenant = await newTenant('cancelled in session');
    const { id } = await createSession(tenant.key);
    const workflow = await startWorkflow(testApp, tenant.key, {
      input: 'Take your time',
      sessionId: id,
      model: 'slow',
    });
    await waitForStatus(testApp, tenant.key, workflow, ['running']);
    expect((await cancelWorkflow(testApp, tenant.key, workflow)).statusCode).toBe(202);
    await waitForStatus(testApp, tenant.key, workflow, ['cancelled']);
    expect(await sessionMessages(tenant.key, id)).toEqual([]);
  });
});

describe('historyFor', () => {
  let tenant: TestTenant;
  let sessionId: string;
  const PAIRS = 100;
  beforeAll(async () => {
    tenant = await newTenant('history');
    sessionId = (await createSession(tenant.key)).id;
    // 200 messages: more than one page of the backwards read.
    for (let n = 1; n <= PAIRS; n++) await appendExchange(tenant, sessionId, n);
  });

  const history = (budgetTokens: number, floorTurns: number) =>
    testApp.services.sessions.historyFor(tenant.id, sessionId, {
      budgetTokens,
      floorTurns,
      kind: 'scripted',
    });

  it('a budget that holds everything returns the whole history in order', async () => {
    const messages = await history(1_000_000, 2);
    expect(messages).toHaveLength(2 * PAIRS);
    expect(messages.slice(0, 2)).toEqual([
      { role: 'user', content: 'q1' },
      { role: 'assistant', content: 'a1', toolCalls: [] },
    ]);
    expect(messages.at(-1)).toEqual({ role: 'assistant', content: `a${PAIRS}`, toolCalls: [] });
  });

  it('a small budget keeps the latest pairs, from a question on', async () => {
    // "q99" and "a99" are 1 + 4 tokens each in the scripted estimate: 10 a pair.
    const messages = await history(32, 0);
    expect(messages.map((message) => message.content)).toEqual([
      'q98',
      'a98',
      'q99',
      'a99',
      'q100',
      'a100',
    ]);
  });

  it('the floor wins over the budget', async () => {
    const messages = await history(0, 2);
    expect(messages.map((message) => message.content)).toEqual(['q99', 'a99', 'q100', 'a100']);
  });

  it('another tenant sees no history of the session', async () => {
    const other = await newTenant('history stranger');
    expect(
      await testApp.services.sessions.historyFor(other.id, sessionId, {
        budgetTokens: 1000,
        floorTurns: 2,
        kind: 'scripted',
      }),
    ).toEqual([]);
  });
});
