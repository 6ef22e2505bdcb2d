import { describe, expect, it } from 'vitest';
import { PARTIAL_ANSWER_TEXT } from '../../../src/orchestrator/tool-loop/prepare-request.js';
import { sessionHelpers } from '../../support/sessions.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { createSession, startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * Workflows of a session against the fake provider: what they send the
 * model of the session's history, and what they append to it.
 */

const h = useToolLoopHarness();
const { sessionMessages } = sessionHelpers(() => h.testApp);

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
});
