import { describe, expect, it } from 'vitest';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  answerToEnd,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * The repeat-fail guard across a pause and within one turn: a call that
 * failed identically twice is warned about and every later identical
 * attempt is blocked without running, after the loop resumes too; the same
 * call twice in one turn counts as two attempts, one after the other.
 */

const h = useToolLoopHarness({ maxIterations: 10 });

const question = {
  id: 'q1',
  name: 'ask_user',
  arguments: { question: 'Which city?', question_type: 'free_text' },
};

describe('the repeat-fail guard', () => {
  it('a call blocked before an ask_user pause stays blocked after the answer resumes the loop', async () => {
    const failing = await h.registerTool('/fail');
    const ran = () => h.tools.calls.filter((call) => call.path === '/fail').length;
    const before = ran();
    const same = { name: failing, arguments: { city: 'Oslo' } };
    h.provider.enqueue(
      callsTo({ ...same, id: 'f1' }),
      callsTo({ ...same, id: 'f2' }),
      // Third identical attempt (blocked), with a question that pauses the workflow.
      callsTo({ ...same, id: 'f3' }, question),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather in Oslo?' });
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ status: 'awaiting_input' });

    // After the answer the model tries the same call a fourth time.
    h.provider.enqueue(callsTo({ ...same, id: 'f4' }), answer('The station is down.'));
    await answerToEnd(h.testApp, h.tenant.key, { id, answer: 'Oslo', version: paused.version });

    const events = await storedEvents(h.testApp, id);
    const failed = events
      .filter((e) => e.type === 'tool_call' && e.status === 'failed' && e.detail.tool === failing)
      .map((e) => [e.detail.callId, e.detail.repeatWarning ?? false, e.detail.blocked ?? false]);
    expect({ ran: ran() - before, failed }).toEqual({
      ran: 2,
      failed: [
        ['f1', false, false],
        ['f2', true, false],
        ['f3', false, true],
        ['f4', false, true],
      ],
    });
  });

  it('after one failure, the same call twice in one turn (parallel): the third identical attempt does not run', async () => {
    const failing = await h.registerTool('/fail');
    const ran = () => h.tools.calls.filter((call) => call.path === '/fail').length;
    const before = ran();
    const same = { name: failing, arguments: { city: 'Oslo' } };
    h.provider.enqueue(callsTo(same), callsTo(same, same), answer('The station is down.'));
    const { events } = await h.run('Weather in Oslo?');
    const failed = events.filter(
      (e) => e.type === 'tool_call' && e.status === 'failed' && e.detail.tool === failing,
    );
    expect({
      ran: ran() - before,
      blocked: failed.filter((e) => e.detail.blocked === true).length,
    }).toEqual({ ran: 2, blocked: 1 });
  });
});
