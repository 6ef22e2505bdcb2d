import { describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../fakes/provider-types.js';
import { useVendorsApp } from '../support/vendors-app.js';
import { createSession, startWorkflow, waitForStatus } from '../support/workflows.js';

/**
 * Session history as the providers receive it, through the real OpenAI and
 * Anthropic SDKs against the fake provider server. The history settings
 * are at their tightest (no token budget, a floor of one pair), so a third
 * workflow shows the trimming too.
 */

const { provider, app, tenant } = useVendorsApp({
  models: [
    { name: 'gpt', provider: 'oai', contextWindow: 8000 },
    { name: 'claude', provider: 'ant', contextWindow: 8000 },
  ],
  defaultModel: 'gpt',
  tenantName: 'history',
  env: { SESSION_HISTORY_MAX_TOKENS: '0', SESSION_HISTORY_FLOOR_TURNS: '1' },
});

const newSession = () => createSession(app(), tenant().key, { title: 'history' });

/** Runs one workflow of the session that the fake answers with `answer`; returns what the provider received. */
async function ask(
  model: string,
  sessionId: string,
  question: string,
  answer: string,
): Promise<RecordedRequest> {
  provider().enqueue({ kind: 'reply', text: answer });
  const arrived = provider().nextRequest();
  const id = await startWorkflow(app(), tenant().key, { input: question, sessionId, model });
  const request = await arrived;
  const done = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
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
    provider().enqueue({ kind: 'reply', text: 'Which number?' });
    const arrived = provider().nextRequest();
    const id = await startWorkflow(app(), tenant().key, { input: 'What was the number?', model });
    expect(conversation(await arrived)).toEqual([['user', 'What was the number?']]);
    await waitForStatus(app(), tenant().key, id, ['completed']);
  });
});
