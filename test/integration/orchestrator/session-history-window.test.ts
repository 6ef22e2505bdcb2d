import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  createSession,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * Session history against a small context window: with the default
 * SESSION_HISTORY_* settings (8,000 tokens, a floor of 2 pairs) and a model
 * of an 8,000-token window, the history gets a quarter of the window.
 */

const h = useToolLoopHarness({ contextWindow: 8_000 });

describe('session history and the model’s context window', () => {
  it('a long chat on a small-window model: the history takes a quarter of the window, keeping the latest pairs', async () => {
    const sessionId = await createSession(h.testApp, h.tenant.key);
    // Eleven exchanges of about 700 tokens each (one o200k token per " data"):
    // about 7,700 tokens, inside the default budget of 8,000 but not a quarter of the window.
    for (let n = 1; n <= 11; n++) {
      await h.testApp.services.sessions.appendExchange({
        tenantId: h.tenant.id,
        sessionId,
        workflowId: randomUUID(),
        question: `Question ${n}`,
        answer: ' data'.repeat(700),
      });
    }
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Four.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'And what is 2 + 2?',
      sessionId,
      model: 'gpt',
      mode: 'simple',
    });
    expect(await waitForStatus(h.testApp, h.tenant.key, id, ['completed'])).toMatchObject({
      result: { answer: 'Four.', reason: 'answered' },
    });
    // No wrap-up on the first turn: the history did not fill the window.
    expect((await storedEvents(h.testApp, id)).filter((event) => event.type === 'warning')).toEqual(
      [],
    );
    const messages = (h.provider.requests[before]?.body.messages ?? []) as {
      role: string;
      content: string;
    }[];
    const questions = messages
      .filter((message) => message.role === 'user')
      .map((message) => message.content);
    // The floor's two pairs (1,400 tokens) fit in 2,000; a third would not.
    expect(questions).toEqual(['Question 10', 'Question 11', 'And what is 2 + 2?']);
  });
});
