import { describe, expect, it } from 'vitest';
import { parseTurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { loadLoopHistory } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * The tool loop's recovery from a context-length error, and ask_user
 * pausing the workflow, against the fake provider server.
 */

const h = useToolLoopHarness();

describe('the tool loop after a context-length error', () => {
  it('a context-length error: tool results condensed and the turn tried once more', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calculator', arguments: { expression: '2 + 2' } }),
      { kind: 'error', status: 400, type: 'context_length' },
      answer('Four.'),
    );
    const { workflow, events } = await h.run('Add two and two');
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Four.' } });
    expect(events.find((event) => event.type === 'warning')?.detail).toMatchObject({
      code: 'context_length_recovery',
    });
    expect(
      events
        .filter((event) => event.type === 'llm_call')
        .map((event) => [event.step, event.status]),
    ).toEqual([
      ['turn-1', 'started'],
      ['turn-1', 'completed'],
      ['turn-2', 'started'],
      ['turn-2', 'failed'],
      ['turn-2', 'started'],
      ['turn-2', 'completed'],
    ]);
  });

  it('a second context-length error ends the workflow with a partial answer', async () => {
    h.provider.enqueue(
      {
        kind: 'reply',
        text: 'Checking. ',
        toolCalls: [{ name: 'calculator', arguments: { expression: '3 + 3' } }],
      },
      { kind: 'error', status: 400, type: 'context_length' },
      { kind: 'error', status: 400, type: 'context_length' },
    );
    const { workflow, events } = await h.run('Add three and three');
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Checking. ' } });
    expect(
      events.filter((event) => event.type === 'warning').map((event) => event.detail.code),
    ).toEqual(['context_length_recovery', 'context_exhausted']);
  });
});

describe.each(['gpt', 'claude'])('ask_user on %s', (model) => {
  it('ask_user pauses the workflow with a clarification_request; the turn is persisted with its waiting call', async () => {
    h.provider.enqueue(
      callsTo(
        { name: 'calculator', arguments: { expression: '1 + 1' } },
        {
          id: 'call_question',
          name: 'ask_user',
          arguments: {
            question: 'Which city?',
            question_type: 'multiple_choice',
            options: ['Oslo', 'Bergen'],
          },
        },
      ),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather please', model });
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(workflow).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
    const events = await storedEvents(h.testApp, id);
    expect(events.find((event) => event.type === 'clarification_request')).toMatchObject({
      status: 'paused',
      detail: {
        question: 'Which city?',
        question_type: 'multiple_choice',
        options: ['Oslo', 'Bergen'],
        toolCallId: 'call_question',
      },
    });
    expect(events.some((event) => event.type === 'workflow_end')).toBe(false);
    const history = await loadLoopHistory(h.testApp.services.database.db, {
      tenantId: h.tenant.id,
      workflowId: id,
    });
    expect(history.messages.map((message) => message.role)).toEqual(['assistant', 'tool']);
    const { rows } = await h.testApp.services.database.pool.query(
      'SELECT state FROM workflow_turns WHERE workflow_id = $1',
      [id],
    );
    expect(parseTurnState(rows[0]?.state).awaiting).toEqual({
      toolCallId: 'call_question',
      toolName: 'ask_user',
    });
  });
});
