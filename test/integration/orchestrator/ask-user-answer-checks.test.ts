import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import { expectProblem } from '../../support/problems.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * `POST /v1/workflows/:id/answer` refusals a client acting on an old screen
 * or an empty box sees: the version before the answer's fit, and an empty
 * answer as blank as a blank one.
 */

const h = useToolLoopHarness();

const { act } = pipelineRequests(() => h);

const cityQuestion = {
  name: 'ask_user',
  arguments: {
    question: 'Which city?',
    question_type: 'multiple_choice',
    options: ['Oslo', 'Bergen'],
  },
};

describe('answer checks', () => {
  it('a stale version is 409 stale_version even when the answer does not fit the newer question', async () => {
    h.provider.enqueue(callsTo(cityQuestion));
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather please' });
    const first = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    const seen = first.version as number;
    // Another tab answers; the model asks a second, yes/no question.
    h.provider.enqueue(
      callsTo({ name: 'ask_user', arguments: { question: 'Celsius?', question_type: 'yes_no' } }),
    );
    expect((await act(id, 'answer', { answer: 'Oslo', version: seen })).statusCode).toBe(202);
    const second = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(second).toMatchObject({ status: 'awaiting_input' });
    expect(second.version).toBeGreaterThan(seen);

    // This tab still shows the first question, at the version it saw.
    const late = await act(id, 'answer', { answer: 'Bergen', version: seen });
    const body = expectProblem(late, 409, 'stale_version');
    expect(body.current).toMatchObject({ status: 'awaiting_input', version: second.version });
    // Same by If-Match.
    expectProblem(
      await act(id, 'answer', { answer: 'Bergen' }, { 'if-match': `"${seen}"` }),
      409,
      'stale_version',
    );

    h.provider.enqueue(answer('Done.'));
    expect((await act(id, 'answer', { answer: 'yes' })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
  });

  it('an empty answer is answer_blank, as a blank one is', async () => {
    h.provider.enqueue(
      callsTo({ name: 'ask_user', arguments: { question: 'Why?', question_type: 'free_text' } }),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'help me' });
    await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expectProblem(await act(id, 'answer', { answer: '   ' }), 400, 'answer_blank');
    expectProblem(await act(id, 'answer', { answer: '' }), 400, 'answer_blank');
    await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/cancel`,
      headers: bearer(h.tenant.key),
    });
  });
});
