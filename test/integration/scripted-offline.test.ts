import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  startWorkflow,
  storedEvents,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/**
 * The offline default as a user of `npm start` meets it: the scripted
 * model's tool calls go through the real built-ins and the real tool loop,
 * so what it answers is what those tools returned.
 */

const { app, newTenant } = useScriptedApp();

describe('the scripted model with the built-in tools', () => {
  it('answers an arithmetic question with what the calculator returned', async () => {
    const tenant = await newTenant('offline-calculator');
    const id = await startWorkflow(app(), tenant.key, { input: 'What is 6 * 7?' });
    const done = await waitForStatus(app(), tenant.key, id, ['completed', 'failed']);
    expect(done.status).toBe('completed');
    expect(done.result).toMatchObject({ answer: '[scripted model] Using calculator: 42' });
  });

  it('asks the user about a vague request, and the answer resumes the workflow', async () => {
    const tenant = await newTenant('offline-clarification');
    const id = await startWorkflow(app(), tenant.key, { input: 'help' });
    const waiting = await waitForStatus(app(), tenant.key, id, ['awaiting_input', 'failed']);
    expect(waiting).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
    const events = await storedEvents(app(), id);
    expect(events.find((event) => event.type === 'clarification_request')?.detail).toMatchObject({
      question: 'Could you tell me more about what you need?',
      question_type: 'free_text',
    });

    const answered = await app().app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/answer`,
      headers: bearer(tenant.key),
      payload: { answer: 'the opening hours of the museum' },
    });
    expect(answered.statusCode, answered.body).toBe(202);
    const done = await waitForStatus(app(), tenant.key, id, ['completed', 'failed']);
    expect(done.status).toBe('completed');
    expect(done.result).toMatchObject({
      answer: '[scripted model] Using ask_user: The user answered: the opening hours of the museum',
    });
  });
});
