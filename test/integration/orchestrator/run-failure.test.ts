import { beforeAll, describe, expect, it } from 'vitest';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  openWork,
  startWorkflow,
  storedEvents,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A run that fails its workflow on an unexpected error ends what it had
 * started and not ended with it, as a cancel does. The error here:
 * PostgreSQL refuses every tool-loop turn's write, through a trigger this
 * file's database gets.
 */

const h = useToolLoopHarness();
beforeAll(async () => {
  await h.testApp.services.database.pool.query(`
    CREATE FUNCTION refuse_turn() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'turn refused by the test'; END $$;
    CREATE TRIGGER refuse_turns BEFORE INSERT ON workflow_turns
      FOR EACH ROW EXECUTE FUNCTION refuse_turn();`);
});

describe('a run failed by an unexpected error', () => {
  it('fails its workflow internal_error, and the model call it had started ends failed before workflow_end', async () => {
    let id: string | undefined;
    const llmCallStored = async () =>
      id !== undefined &&
      (await storedEvents(h.testApp, id)).some((event) => event.type === 'llm_call')
        ? true
        : undefined;
    h.provider.enqueue(
      {
        kind: 'reply',
        toolCalls: [{ id: 'call_1', name: 'calculator', arguments: { expression: '6 * 7' } }],
        // The call's `started` event is written while its reply streams; its
        // end would go with the turn's write, which is refused.
        betweenChunks: async () => {
          await waitFor(llmCallStored, 'the llm_call started event to be stored');
        },
      },
      answer('It is 42.'),
    );
    id = await startWorkflow(h.testApp, h.tenant.key, { input: 'What is 6 * 7?', mode: 'simple' });
    const failed = await waitForStatus(h.testApp, h.tenant.key, id, ['failed', 'completed']);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'internal_error' } });

    const events = await storedEvents(h.testApp, id);
    // The turn's write goes on beside the next model call, whose `started`
    // event may be stored too before the run learns of the failure.
    expect(events.at(-1)).toMatchObject({
      type: 'workflow_end',
      status: 'failed',
      detail: { error: { code: 'internal_error' } },
    });
    expect(events).toContainEqual(
      expect.objectContaining({
        type: 'llm_call',
        step: 'turn-1',
        status: 'failed',
        detail: {
          model: 'gpt',
          error: { code: 'workflow_failed', message: 'The workflow failed during this call.' },
        },
      }),
    );
    expect(openWork(events)).toEqual([]);
  });
});
