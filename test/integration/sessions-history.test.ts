import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { sessionHelpers } from '../support/sessions.js';
import {
  cancelWorkflow,
  countWorkflows,
  createSession,
  postWorkflow,
  startWorkflow,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/**
 * Sessions and workflows: a workflow's session must be the tenant's, a
 * completed workflow adds its question and answer to it, and historyFor
 * reads the history a workflow of the session sees (the latest messages
 * within a token budget, and never fewer turns than the floor).
 */

const { app, newTenant } = useScriptedApp();
const { sessionMessages, appendExchange } = sessionHelpers(app);

describe('workflows in a session', () => {
  it.each([
    ['a session that does not exist', () => randomUUID()],
    ['a sessionId that is no uuid', () => 'chat-1'],
  ])('%s: 400 unknown_session and no workflow row', async (_, sessionId) => {
    const tenant = await newTenant(`unknown session ${randomUUID()}`);
    const response = await postWorkflow(
      app(),
      tenant.key,
      { input: 'hi', sessionId: sessionId() },
      { 'idempotency-key': 'unknown-session' },
    );
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json()).toMatchObject({
      code: 'unknown_session',
      errors: [{ field: 'body.sessionId' }],
    });
    expect(await countWorkflows(app(), tenant.id)).toBe(0);
    // The key of the refused request is still free.
    expect(
      (
        await postWorkflow(
          app(),
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
    const id = await createSession(app(), owner.key);
    const response = await postWorkflow(app(), other.key, { input: 'hi', sessionId: id });
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('unknown_session');
    expect(await countWorkflows(app(), other.id)).toBe(0);
  });

  it('a completed workflow’s question and answer are in its session, visible as soon as it is completed', async () => {
    const tenant = await newTenant('completed into session');
    const id = await createSession(app(), tenant.key);
    const first = await startWorkflow(app(), tenant.key, {
      input: 'First question',
      sessionId: id,
    });
    const done = await waitForStatus(app(), tenant.key, first, ['completed', 'failed']);
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

    const second = await startWorkflow(app(), tenant.key, {
      input: 'Second question',
      sessionId: id,
    });
    await waitForStatus(app(), tenant.key, second, ['completed']);
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
    const id = await createSession(app(), tenant.key);
    const workflow = await startWorkflow(app(), tenant.key, {
      input: 'Take your time',
      sessionId: id,
      model: 'slow',
    });
    await waitForStatus(app(), tenant.key, workflow, ['running']);
    expect((await cancelWorkflow(app(), tenant.key, workflow)).statusCode).toBe(202);
    await waitForStatus(app(), tenant.key, workflow, ['cancelled']);
    expect(await sessionMessages(tenant.key, id)).toEqual([]);
  });
});

describe('historyFor', () => {
  let tenant: TestTenant;
  let sessionId: string;
  const PAIRS = 100;
  beforeAll(async () => {
    tenant = await newTenant('history');
    sessionId = await createSession(app(), tenant.key);
    // 200 messages: more than one page of the backwards read.
    for (let n = 1; n <= PAIRS; n++) await appendExchange(tenant, sessionId, n);
  });

  const history = (budgetTokens: number, floorTurns: number) =>
    app().services.sessions.historyFor(tenant.id, sessionId, {
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

  it.each([
    ['everything', 1_000_000, 2],
    ['a small budget', 32, 0],
    ['a budget past the first page', 900, 0],
  ])(
    'begun with what a create read with the session (%s): the same history as read alone',
    async (_, budgetTokens, floorTurns) => {
      const found = await app().services.sessions.findForWorkflow(tenant.id, sessionId);
      if (!found) throw new Error('the session is not found');
      expect(found.historyStart.throughSeq).toBe(2 * PAIRS);
      // The newest page: the rest is read from before it.
      expect(found.historyStart.newestFirst[0]).toMatchObject({
        seq: 2 * PAIRS,
        content: `a${PAIRS}`,
      });
      const begun = await app().services.sessions.historyFor(tenant.id, sessionId, {
        budgetTokens,
        floorTurns,
        kind: 'scripted',
        start: found.historyStart,
      });
      expect(begun).toEqual(await history(budgetTokens, floorTurns));
    },
  );

  it('another tenant sees no history of the session', async () => {
    const other = await newTenant('history stranger');
    expect(
      await app().services.sessions.historyFor(other.id, sessionId, {
        budgetTokens: 1000,
        floorTurns: 2,
        kind: 'scripted',
      }),
    ).toEqual([]);
  });
});
