import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  getWorkflow,
  startWorkflow,
  storedEvents,
  useScriptedApp,
  waitFor,
  waitForStatus,
} from '../support/workflows.js';

/**
 * The offline default as a user of `npm start` meets it: the scripted
 * model's tool calls go through the real built-ins and the real tool loop,
 * so what it answers is what those tools returned.
 */

const { app, newTenant } = useScriptedApp();

describe('the scripted model through the real app and tools', () => {
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

  it('runs a complex question through its pipeline, with a modify, to an answer built from the stage results', async () => {
    const tenant = await newTenant('offline-pipeline');
    const question = 'Compare the populations of France and Spain, then make a summary table';
    const id = await startWorkflow(app(), tenant.key, { input: question });
    const paused = await waitForStatus(app(), tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });

    const review = (action: string, payload?: object) =>
      app().app.inject({
        method: 'POST',
        url: `/v1/workflows/${id}/${action}`,
        headers: bearer(tenant.key),
        ...(payload ? { payload } : {}),
      });
    const modified = await review('modify', { feedback: 'Use the 2023 census.' });
    expect(modified.statusCode, modified.body).toBe(202);
    // modify: running again (version + 1), then paused at the re-run stage's checkpoint (+ 2).
    await waitFor(async () => {
      const workflow = await getWorkflow(app(), tenant.key, id);
      return workflow.status === 'awaiting_input' && workflow.version >= paused.version + 2
        ? workflow
        : undefined;
    }, 'the modified stage to pause again');
    const continued = await review('continue');
    expect(continued.statusCode, continued.body).toBe(202);
    const done = await waitForStatus(app(), tenant.key, id, ['completed', 'failed']);

    expect(done.status).toBe('completed');
    expect(done.result).toMatchObject({
      answer: [
        `[scripted model] The answer to "${question}", put together offline from what the stages found:`,
        '- Compare the populations of France and…: Worked on "Compare the populations of France and Spain." offline, following the feedback "Use the 2023 census.": no findings beyond the question itself.',
        '- Make a summary table: Worked on "Make a summary table." offline: no findings beyond the question itself.',
        'Configure a model provider for a real answer.',
      ].join('\n'),
    });
  });
});
