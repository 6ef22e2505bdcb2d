import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, waitFor, waitForStatus } from '../../support/workflows.js';

/**
 * POST /answer reads the workflow row (status, version), then the question
 * it waits on, and checks the answer against that. When the workflow is
 * answered elsewhere and asks a new question between the two reads, an
 * answer sent with the version the client saw is checked against the
 * question that row waited on, and gets 409 stale_version, not a 400
 * against a question the client never saw (ask-user-answer-checks.test.ts:
 * the version is checked before the fit). The gap is held open here by
 * holding that one query at the driver.
 */

const h = useToolLoopHarness();
const originalQuery = pg.Client.prototype.query;
afterEach(() => {
  pg.Client.prototype.query = originalQuery;
});

const act = (id: string, payload: Record<string, unknown>) =>
  h.testApp.app.inject({
    method: 'POST',
    url: `/v1/workflows/${id}/answer`,
    headers: bearer(h.tenant.key),
    payload,
  });

describe('an answer whose question changes between the answer’s two reads', () => {
  it('is a 409 stale_version, not a 400 against the newer question', async () => {
    h.provider.enqueue(
      callsTo({
        name: 'ask_user',
        arguments: {
          question: 'Which city?',
          question_type: 'multiple_choice',
          options: ['Oslo', 'Bergen'],
        },
      }),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather please' });
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input']);

    let held!: () => void;
    const reached = new Promise<void>((resolve) => {
      held = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let armed = true;
    // biome-ignore lint/suspicious/noExplicitAny: a driver hook for the test.
    pg.Client.prototype.query = function (this: pg.Client, ...args: any[]): any {
      const [first, second] = args;
      const text = typeof first === 'string' ? first : first?.text;
      const values = typeof first === 'string' ? second : first?.values;
      if (
        armed &&
        typeof text === 'string' &&
        text.includes('"workflow_events"') &&
        Array.isArray(values) &&
        values.includes('clarification_request') &&
        values.includes(id)
      ) {
        armed = false;
        held();
        return gate.then(() => originalQuery.apply(this, args as never));
      }
      return originalQuery.apply(this, args as never);
    } as never;

    // Tab A: the right version, an option of the question it shows.
    const tabA = act(id, { answer: 'Bergen', version: paused.version });
    await Promise.race([
      reached,
      new Promise((_, reject) => setTimeout(() => reject(new Error('query not held')), 5000)),
    ]);

    // Meanwhile tab B answers, and the model asks a yes/no question.
    h.provider.enqueue(
      callsTo({ name: 'ask_user', arguments: { question: 'Celsius?', question_type: 'yes_no' } }),
    );
    const tabB = await act(id, { answer: 'Oslo', version: paused.version });
    expect(tabB.statusCode, tabB.body).toBe(202);
    await waitFor(async () => {
      const now = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'running']);
      return now.status === 'awaiting_input' && now.version > paused.version ? true : undefined;
    }, 'the second question');

    release();
    const late = await tabA;
    expect({ status: late.statusCode, code: late.json().code }).toEqual({
      status: 409,
      code: 'stale_version',
    });

    h.provider.enqueue(answer('Done.'));
    expect((await act(id, { answer: 'yes' })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
  });
});
