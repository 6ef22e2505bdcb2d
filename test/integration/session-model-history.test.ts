import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer, RecordedRequest } from '../fakes/provider-types.js';
import { startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  createSession,
  createTenant,
  startWorkflow,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

/**
 * Session history as the providers receive it, through the real OpenAI and
 * Anthropic SDKs against the fake provider server. The history settings
 * are at their tightest (no token budget, a floor of one pair), so a third
 * workflow shows the trimming too.
 */

let server: FakeProviderServer;
let testApp: TestApp;
let tenant: TestTenant;

beforeAll(async () => {
  server = await startFakeProviderServer();
  const model = (name: string, provider: string) => ({
    name,
    provider,
    modelId: `${name}-id`,
    contextWindow: 8000,
    maxOutputTokens: 256,
  });
  testApp = await startTestApp({
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        { name: 'oai', kind: 'openai', baseUrl: server.openaiBaseUrl },
        { name: 'ant', kind: 'anthropic', baseUrl: server.anthropicBaseUrl },
      ],
      models: [model('gpt', 'oai'), model('claude', 'ant')],
      defaultModel: 'gpt',
    }),
    SESSION_HISTORY_MAX_TOKENS: '0',
    SESSION_HISTORY_FLOOR_TURNS: '1',
    RATE_LIMIT_MAX: '100000',
  });
  tenant = await createTenant(testApp, await bootstrapOperator(testApp), { name: 'history' });
});
afterAll(async () => {
  await testApp?.close();
  await server?.close();
});

const newSession = () => createSession(testApp, tenant.key, { title: 'history' });

/** Runs one workflow of the session that the fake answers with `answer`; returns what the provider received. */
async function ask(
  model: string,
  sessionId: string,
  question: string,
  answer: string,
): Promise<RecordedRequest> {
  server.enqueue({ kind: 'reply', text: answer });
  const arrived = server.nextRequest();
  const id = await startWorkflow(testApp, tenant.key, { input: question, sessionId, model });
  const request = await arrived;
  const done = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
  expect(done).toMatchObject({ status: 'completed', result: { answer } });
  return request;
}

/** Role and text of each message, whichever vendor's shape it came in; OpenAI's system message left out. */
function conversation(request: RecordedRequest): [string, string][] {
  const messages: { role: string; content: unknown }[] = request.body.messages;
  return messages
    .filter((message) => message.role !== 'system')
    .map((message) => [
      message.role,
      typeof message.content === 'string'
        ? message.content
        : (message.content as { text: string }[]).map((block) => block.text).join(''),
    ]);
}

describe.each(['gpt', 'claude'])('session history sent to %s', (model) => {
  it('the second workflow sees the first question and answer before its own input', async () => {
    const sessionId = await newSession();
    const first = await ask(model, sessionId, 'Which planet is largest?', 'Jupiter.');
    expect(conversation(first)).toEqual([['user', 'Which planet is largest?']]);

    const second = await ask(model, sessionId, 'How many moons does it have?', 'Ninety-five.');
    expect(conversation(second)).toEqual([
      ['user', 'Which planet is largest?'],
      ['assistant', 'Jupiter.'],
      ['user', 'How many moons does it have?'],
    ]);

    // Over a zero budget, the floor of one pair keeps only the latest exchange.
    const third = await ask(model, sessionId, 'And the smallest planet?', 'Mercury.');
    expect(conversation(third)).toEqual([
      ['user', 'How many moons does it have?'],
      ['assistant', 'Ninety-five.'],
      ['user', 'And the smallest planet?'],
    ]);
  });

  it('a workflow without a session sees no history', async () => {
    const sessionId = await newSession();
    await ask(model, sessionId, 'Remember the number 7.', 'Noted.');
    server.enqueue({ kind: 'reply', text: 'Which number?' });
    const arrived = server.nextRequest();
    const id = await startWorkflow(testApp, tenant.key, { input: 'What was the number?', model });
    expect(conversation(await arrived)).toEqual([['user', 'What was the number?']]);
    await waitForStatus(testApp, tenant.key, id, ['completed']);
  });
});
