import { describe, expect, it } from 'vitest';
import { PARTIAL_ANSWER_TEXT } from '../../../src/orchestrator/tool-loop/prepare-request.js';
import { bearer } from '../../support/app.js';
import { planReply, stage } from '../../support/pipeline-http.js';
import { expectProblem } from '../../support/problems.js';
import { sessionHelpers } from '../../support/sessions.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { createSession, startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * Workflows of a session against the fake provider: what they send the
 * model of the session's history, and what they append to it.
 */

const h = useToolLoopHarness();
const { sessionMessages } = sessionHelpers(() => h.testApp);

/** The user messages of a request, as the model read them. */
const userTexts = (request: { body: Record<string, unknown> } | undefined): string[] =>
  ((request?.body.messages ?? []) as { role: string; content: unknown }[])
    .filter((message) => message.role === 'user' && typeof message.content === 'string')
    .map((message) => message.content as string);

/** A session holding one completed exchange: `question` answered with `reply`. */
async function sessionWith(question: string, reply: string): Promise<string> {
  const sessionId = await createSession(h.testApp, h.tenant.key);
  h.provider.enqueue(answer(reply));
  const id = await startWorkflow(h.testApp, h.tenant.key, {
    input: question,
    sessionId,
    mode: 'simple',
  });
  const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
  expect(done).toMatchObject({ status: 'completed', result: { answer: reply } });
  return sessionId;
}

describe('workflows of a session', () => {
  it('context exhausted: the partial answer is this workflow’s, never an earlier answer of the session', async () => {
    const previous = 'Jupiter is the largest planet.';
    const sessionId = await sessionWith('Which planet is largest?', previous);
    h.provider.enqueue(
      { kind: 'error', status: 400, type: 'context_length' },
      { kind: 'error', status: 400, type: 'context_length' },
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Summarise the history of Rome in detail',
      sessionId,
      mode: 'simple',
    });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done.result).toMatchObject({ answer: PARTIAL_ANSWER_TEXT, reason: 'context_exhausted' });
    const messages = await sessionMessages(h.tenant.key, sessionId);
    expect(messages.filter((message) => message.content === previous)).toHaveLength(1);
  });

  it('a workflow resumed after a pause sees the history it started with, not exchanges added meanwhile', async () => {
    const sessionId = await sessionWith('Which planet is largest?', 'Jupiter.');
    const firstRequest = h.provider.requests.length;
    h.provider.enqueue(
      callsTo({
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      }),
    );
    const paused = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Weather please',
      sessionId,
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, paused, ['awaiting_input']);
    expect(userTexts(h.provider.requests[firstRequest])).toEqual([
      'Which planet is largest?',
      'Weather please',
    ]);

    // Meanwhile, another workflow of the session completes.
    h.provider.enqueue(answer('Paris.'));
    const other = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Capital of France?',
      sessionId,
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, other, ['completed']);

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Sunny in Oslo.'));
    const answered = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${paused}/answer`,
      headers: bearer(h.tenant.key),
      payload: { answer: 'Oslo' },
    });
    expect(answered.statusCode, answered.body).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, paused, ['completed']);
    expect(userTexts(h.provider.requests[before])).toEqual([
      'Which planet is largest?',
      'Weather please',
    ]);
    // Its exchange goes after the other's: the session keeps completion order.
    expect((await sessionMessages(h.tenant.key, sessionId)).map((m) => m.content)).toEqual([
      'Which planet is largest?',
      'Jupiter.',
      'Capital of France?',
      'Paris.',
      'Weather please',
      'Sunny in Oslo.',
    ]);
  });

  it('a pipeline of a session: the planner, every stage and the synthesis see the history', async () => {
    const sessionId = await sessionWith(
      'Which three suppliers did we shortlist?',
      'Acme Widgets, Globex and Initech.',
    );
    const before = h.provider.requests.length;
    h.provider.enqueue(
      planReply(stage('a'), stage('b')),
      answer('Result of a.'),
      answer('Result of b.'),
      answer('The final comparison.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Compare the three of them on price and delivery',
      sessionId,
      mode: 'complex',
    });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({
      status: 'completed',
      result: { answer: 'The final comparison.' },
    });
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(4);
    // History first, then the call's own message last.
    for (const request of requests) {
      const texts = userTexts(request);
      expect(texts[0]).toBe('Which three suppliers did we shortlist?');
      expect(texts).toHaveLength(2);
      expect(texts[1]).toContain('Compare the three of them on price and delivery');
    }
    expect(
      requests.map(
        (request) =>
          ((request.body.messages as { role: string; content: unknown }[]).find(
            (message) => message.role === 'assistant',
          )?.content as string | undefined) ?? null,
      ),
    ).toEqual(Array(4).fill('Acme Widgets, Globex and Initech.'));
  });

  it('a session’s model is its workflows’ when their request names none; a request’s own wins', async () => {
    const created = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: bearer(h.tenant.key),
      payload: { model: 'claude' },
    });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toMatchObject({ model: 'claude' });
    const sessionId = created.json().id as string;

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('From the session’s model.'), answer('From the request’s model.'));
    const bySession = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Which model?',
      sessionId,
      mode: 'simple',
    });
    expect(await waitForStatus(h.testApp, h.tenant.key, bySession, ['completed'])).toMatchObject({
      model: 'claude',
    });
    const byRequest = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Which model now?',
      sessionId,
      model: 'gpt',
      mode: 'simple',
    });
    expect(await waitForStatus(h.testApp, h.tenant.key, byRequest, ['completed'])).toMatchObject({
      model: 'gpt',
    });
    expect(h.provider.requests.slice(before).map((request) => request.api)).toEqual([
      'anthropic',
      'openai',
    ]);
  });

  it('a session naming a model the catalogue lacks is a 400 unknown_model', async () => {
    const refused = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: bearer(h.tenant.key),
      payload: { model: 'nope' },
    });
    expectProblem(refused, 400, 'unknown_model');
  });

  it('a sessionId in capitals names the same session: the workflow lists under the session’s id', async () => {
    const sessionId = await createSession(h.testApp, h.tenant.key);
    h.provider.enqueue(answer('Shouted.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Capitals?',
      sessionId: sessionId.toUpperCase(),
      mode: 'simple',
    });
    expect(await waitForStatus(h.testApp, h.tenant.key, id, ['completed'])).toMatchObject({
      sessionId,
    });
    const listed = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows?sessionId=${sessionId}`,
      headers: bearer(h.tenant.key),
    });
    expect(listed.json().items.map((item: { id: string }) => item.id)).toEqual([id]);
  });
});
