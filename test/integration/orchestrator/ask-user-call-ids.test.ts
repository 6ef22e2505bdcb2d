import { describe, expect, it } from 'vitest';
import type { TurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import { workflowEventsRepository } from '../../../src/store/workflow-events.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  orphanedWorkflow,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * Tool call ids are not unique across turns: an OpenAI-compatible server
 * that sends no id gets `call_<index>` from Waymark itself
 * (openai/assemble-tool-calls.ts), so every turn's first call is `call_0`.
 * An answer belongs to the question of its turn (resume.ts `answerKey`).
 */

const h = useToolLoopHarness();

const { act } = pipelineRequests(() => h);

describe('two ask_user questions in two turns with the same call id', () => {
  it('each question keeps its own answer in the conversation the model sees', async () => {
    // id '' : the server sends an empty id, Waymark names the call call_0 (as a compat server would).
    h.provider.enqueue(
      callsTo({
        id: '',
        name: 'ask_user',
        arguments: {
          question: 'Which city?',
          question_type: 'multiple_choice',
          options: ['Oslo', 'Bergen'],
        },
      }),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Weather please',
      model: 'gpt',
    });
    let paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ status: 'awaiting_input' });

    h.provider.enqueue(
      callsTo({
        id: '',
        name: 'ask_user',
        arguments: { question: 'Celsius?', question_type: 'yes_no' },
      }),
    );
    const before = h.provider.requests.length;
    expect((await act(id, 'answer', { answer: 'Oslo' })).statusCode).toBe(202);
    paused = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'failed',
      'completed',
    ]);
    expect(paused).toMatchObject({ status: 'awaiting_input' });

    h.provider.enqueue(answer('Oslo, in Celsius.'));
    expect((await act(id, 'answer', { answer: 'no' })).statusCode).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed' });

    const requests = h.provider.requests.slice(before);
    // turn 2 (after the first answer) and turn 3 (after the second)
    expect(requests).toHaveLength(2);
    expect(toolResultsOf(requests[0]).map((r) => r.content)).toEqual(['The user answered: Oslo']);
    // The first question was answered "Oslo"; the model must still see that in turn 3.
    expect(toolResultsOf(requests[1]).map((r) => r.content)).toEqual([
      'The user answered: Oslo',
      'The user answered: no',
    ]);
  });
});

describe('a crash after the second question with a reused call id was persisted, before the pause', () => {
  it('the run taking over asks the second question again instead of answering it with the first answer', async () => {
    const db = h.testApp.services.database.db;
    const id = await orphanedWorkflow(h.testApp, h.tenant.id, 'Weather please');
    const question = (turn: number, args: Record<string, unknown>): TurnState => ({
      schemaVersion: 1,
      turn,
      model: 'gpt',
      assistant: { content: '', toolCalls: [{ id: 'call_0', name: 'ask_user', arguments: args }] },
      toolResults: [],
      awaiting: { toolCallId: 'call_0', toolName: 'ask_user' },
      finishReason: 'tool_calls',
    });
    // Turn 1 asked which city and was answered "Oslo"; turn 2 asked a yes/no
    // question under the same id and its runner died before the pause.
    await workflowEventsRepository(db).appendNotified({
      tenantId: h.tenant.id,
      workflowId: id,
      events: [
        {
          type: 'clarification_request',
          step: 'turn-1',
          status: 'paused',
          detail: {
            question: 'Which city?',
            question_type: 'multiple_choice',
            options: ['Oslo', 'Bergen'],
            context: null,
            toolCallId: 'call_0',
          },
          elapsedMs: null,
        },
        {
          type: 'clarification_answer',
          step: 'turn-1',
          status: 'completed',
          detail: { toolCallId: 'call_0', answer: 'Oslo' },
          elapsedMs: null,
        },
      ],
      writes: [
        turnWrite(
          question(1, {
            question: 'Which city?',
            question_type: 'multiple_choice',
            options: ['Oslo', 'Bergen'],
          }),
        ),
        turnWrite(question(2, { question: 'Celsius?', question_type: 'yes_no' })),
      ],
      origin: 'test',
    });

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Should not be asked for yet.'));
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).toContain(id);
    const after = await waitForStatus(h.testApp, h.tenant.key, id, [
      'awaiting_input',
      'completed',
      'failed',
    ]);
    // The user never answered "Celsius?": the workflow must wait for that answer.
    expect(after).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
    expect(h.provider.requests.length).toBe(before);
    const events = await storedEvents(h.testApp, id);
    expect(
      events.filter((event) => event.type === 'clarification_request').at(-1)?.detail,
    ).toMatchObject({
      question: 'Celsius?',
    });
  });
});
