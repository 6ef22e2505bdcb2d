import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import type { TurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import { workflowEventsRepository } from '../../../src/store/workflow-events.js';
import { workflowsRepository } from '../../../src/store/workflows.js';
import { bearer } from '../../support/app.js';
import { pipelineRequests } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  handOver,
  openWork,
  orphanedWorkflow,
  startWorkflow,
  storedEvents,
  takeOverToEnd,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A tool loop that runs again: after the user answers its question
 * (`POST /v1/workflows/:id/answer`), and after its runner is gone (a lease
 * reclaim). Either way it continues from its persisted turns and never
 * repeats a completed one.
 */

const h = useToolLoopHarness();

const cityQuestion = {
  id: 'call_question',
  name: 'ask_user',
  arguments: {
    question: 'Which city?',
    question_type: 'multiple_choice',
    options: ['Oslo', 'Bergen'],
  },
};

/** Starts a workflow on `model` that asks which city, and waits for its pause. */
async function pausedWorkflow(model = 'gpt'): Promise<{ id: string; version: number }> {
  h.provider.enqueue(
    callsTo(
      { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
      cityQuestion,
    ),
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather please', model });
  const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
  expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
  return { id, version: paused.version as number };
}

const { act } = pipelineRequests(() => h);

describe.each(['gpt', 'claude'])('answering a clarification on %s', (model) => {
  it('resumes the loop with the answer as the question’s result; the first turn is not asked again', async () => {
    const { id, version } = await pausedWorkflow(model);
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Sunny in Bergen.'));

    const accepted = await act(id, 'answer', { answer: 'bergen', version });
    expect(accepted.statusCode, accepted.body).toBe(202);
    expect(accepted.json()).toMatchObject({ status: 'running', version: version + 1 });

    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'Sunny in Bergen.' } });
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(1);
    const results = toolResultsOf(requests[0]);
    expect(results.map((result) => result.callId)).toEqual(['call_sum', 'call_question']);
    // The option as the question spelled it.
    expect(results[1]?.content).toBe('The user answered: Bergen');

    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
    expect(events.find((event) => event.type === 'clarification_answer')).toMatchObject({
      step: 'turn-1',
      detail: { toolCallId: 'call_question', answer: 'Bergen' },
    });
    // Neither begun nor classified twice.
    expect(events.filter((event) => event.type === 'workflow_start')).toHaveLength(1);
    expect(events.filter((event) => event.type === 'classification')).toHaveLength(1);
    expect(events.filter((event) => event.type === 'llm_call').map((event) => event.step)).toEqual([
      'turn-1',
      'turn-1',
      'turn-2',
      'turn-2',
    ]);
  });
});

describe('answering a clarification', () => {
  it('an answer that is not among the options is a 400 and the workflow keeps waiting', async () => {
    const { id, version } = await pausedWorkflow();
    const refused = await act(id, 'answer', { answer: 'Trondheim' });
    expect(refused.statusCode).toBe(400);
    expect(refused.headers['content-type']).toContain('application/problem+json');
    expect(refused.json()).toMatchObject({
      code: 'answer_not_an_option',
      errors: [{ field: 'body.answer' }],
    });
    const still = await h.testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${id}`,
      headers: bearer(h.tenant.key),
    });
    expect(still.json()).toMatchObject({ status: 'awaiting_input', version });
    expect(
      (
        await h.testApp.app.inject({
          method: 'POST',
          url: `/v1/workflows/${id}/cancel`,
          headers: bearer(h.tenant.key),
        })
      ).statusCode,
    ).toBe(202);
  });

  it('a stale version is a 409 with the current one, by body or If-Match', async () => {
    const { id, version } = await pausedWorkflow();
    const stale = await act(id, 'answer', { answer: 'Oslo', version: version - 1 });
    expect(stale.statusCode).toBe(409);
    expect(stale.json()).toMatchObject({
      code: 'stale_version',
      current: { status: 'awaiting_input', awaitingReason: 'clarification', version },
    });
    const staleHeader = await act(
      id,
      'answer',
      { answer: 'Oslo' },
      { 'if-match': `"${version - 1}"` },
    );
    expect(staleHeader.json()).toMatchObject({ code: 'stale_version' });
    const mismatch = await act(
      id,
      'answer',
      { answer: 'Oslo', version },
      { 'if-match': `"${version - 1}"` },
    );
    expect(mismatch.statusCode).toBe(400);
    expect(mismatch.json()).toMatchObject({ code: 'version_mismatch' });
    h.provider.enqueue(answer('Oslo it is.'));
    const accepted = await act(id, 'answer', { answer: 'Oslo' }, { 'if-match': `"${version}"` });
    expect(accepted.statusCode, accepted.body).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
  });

  it('answering a workflow that is not waiting is a 409 naming its status', async () => {
    h.provider.enqueue(answer('Hello.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Say hello' });
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const refused = await act(id, 'answer', { answer: 'yes' });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({
      code: 'not_awaiting_input',
      current: { status: 'completed', awaitingReason: null },
    });
    const unknown = await act(randomUUID(), 'answer', { answer: 'yes' });
    expect(unknown.statusCode).toBe(404);
  });

  it('ten concurrent answers: exactly one is accepted, the others get 409', async () => {
    const { id } = await pausedWorkflow();
    h.provider.enqueue(answer('Done.'));
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, index) =>
        act(id, 'answer', { answer: index % 2 ? 'Oslo' : 'Bergen' }),
      ),
    );
    const codes = responses.map((response) => response.statusCode).sort();
    expect(codes).toEqual([202, 409, 409, 409, 409, 409, 409, 409, 409, 409]);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const events = await storedEvents(h.testApp, id);
    expect(events.filter((event) => event.type === 'clarification_answer')).toHaveLength(1);
  });
});

describe('taking over a workflow whose runner is gone', () => {
  it('resumes from the persisted turns with a `resumed` event; completed turns are not run again', async () => {
    // A workflow another replica ran one turn of, then died holding the lease.
    const db = h.testApp.services.database.db;
    const id = await orphanedWorkflow(h.testApp, h.tenant.id);
    const turn: TurnState = {
      schemaVersion: 1,
      turn: 1,
      model: 'gpt',
      assistant: {
        content: '',
        toolCalls: [{ id: 'call_mul', name: 'calculator', arguments: { expression: '6 * 7' } }],
      },
      toolResults: [
        { toolCallId: 'call_mul', toolName: 'calculator', content: '42', isError: false },
      ],
      awaiting: null,
      finishReason: 'tool_calls',
    };
    await workflowEventsRepository(db).appendNotified({
      tenantId: h.tenant.id,
      workflowId: id,
      events: [],
      writes: [turnWrite(turn)],
      origin: 'test',
    });

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('It is 42.'));
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).toContain(id);

    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
    const requests = h.provider.requests.slice(before);
    expect(requests).toHaveLength(1);
    expect(toolResultsOf(requests[0])).toEqual([{ callId: 'call_mul', content: '42' }]);
    const events = await storedEvents(h.testApp, id);
    expect(events[0]).toMatchObject({
      type: 'resumed',
      detail: { replica: h.testApp.services.replicaId, turns: 1 },
    });
    expect(events.some((event) => event.type === 'classification')).toBe(false);
    expect(events.filter((event) => event.type === 'llm_call').map((event) => event.step)).toEqual([
      'turn-2',
      'turn-2',
    ]);
  });

  it('handed over in the middle of a tool call: the run taking over ends the call left open as interrupted, and the model gets its interrupted result', async () => {
    const hanging = await h.registerTool('/hang', { timeoutMs: 60_000 });
    const hangsBefore = h.tools.calls.filter((call) => call.path === '/hang').length;
    h.provider.enqueue(
      callsTo(
        { id: 'call_hang', name: hanging, arguments: {} },
        { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
      ),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Wait for the tool' });
    await vi.waitFor(
      () =>
        expect(h.tools.calls.filter((call) => call.path === '/hang')).toHaveLength(hangsBefore + 1),
      { timeout: 10_000 },
    );
    await handOver(h.testApp, id);

    const requestsBefore = h.provider.requests.length;
    h.provider.enqueue(answer('Two, after the takeover.'));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    expect(done).toMatchObject({ result: { answer: 'Two, after the takeover.' } });

    const events = await storedEvents(h.testApp, id);
    const resumedAt = events.findIndex((event) => event.type === 'resumed');
    expect(events.slice(resumedAt - 1, resumedAt + 2)).toMatchObject([
      {
        type: 'tool_call',
        step: 'turn-1',
        status: 'failed',
        detail: { tool: hanging, callId: 'call_hang', error: 'interrupted' },
      },
      { type: 'resumed', detail: { interruptedCalls: 1 } },
      // The turn was persisted with the interrupted call's result at the hand-over.
      { type: 'llm_call', step: 'turn-2', status: 'started' },
    ]);
    expect(openWork(events)).toEqual([]);
    const [resumedRequest] = h.provider.requests.slice(requestsBefore);
    expect(toolResultsOf(resumedRequest)).toEqual([
      { callId: 'call_hang', content: expect.stringContaining('interrupted before it finished') },
      { callId: 'call_sum', content: expect.stringContaining('2') },
    ]);
  });

  it('a runner that died during a model call: its call is ended as interrupted, and the turn runs again', async () => {
    const db = h.testApp.services.database.db;
    const id = await orphanedWorkflow(h.testApp, h.tenant.id);
    await workflowEventsRepository(db).appendNotified({
      tenantId: h.tenant.id,
      workflowId: id,
      events: [
        {
          type: 'llm_call',
          step: 'turn-1',
          status: 'started',
          detail: { model: 'gpt', turn: 1, tools: true },
          elapsedMs: null,
        },
      ],
      origin: 'dead-replica',
    });
    h.provider.enqueue(answer('Forty-two.'));
    await h.testApp.services.reclaimer.sweepOnce();
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => [event.type, event.step, event.status])).toEqual([
      ['llm_call', 'turn-1', 'started'],
      ['llm_call', 'turn-1', 'failed'],
      ['resumed', null, 'info'],
      ['llm_call', 'turn-1', 'started'],
      ['llm_call', 'turn-1', 'completed'],
      ['answer', null, 'completed'],
      ['usage', null, 'info'],
      ['workflow_end', null, 'completed'],
    ]);
    expect(events[1]?.detail).toMatchObject({ model: 'gpt', error: { code: 'interrupted' } });
    expect(events[2]?.detail).toMatchObject({ interruptedCalls: 1 });
  });

  it('a live lease is not taken, nor is a workflow just created', async () => {
    const id = randomUUID();
    await workflowsRepository(h.testApp.services.database.db).insert({
      id,
      tenantId: h.tenant.id,
      sessionId: null,
      sessionSeq: null,
      mode: 'simple',
      model: 'gpt',
      input: 'Leased elsewhere',
      tools: [],
      metadata: {},
      idempotencyKey: null,
      requestHash: null,
    });
    await h.testApp.services.database.pool.query(
      `UPDATE workflows SET status = 'running', lease_owner = 'alive', lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
      [id],
    );
    const fresh = randomUUID();
    await workflowsRepository(h.testApp.services.database.db).insert({
      id: fresh,
      tenantId: h.tenant.id,
      sessionId: null,
      sessionSeq: null,
      mode: 'simple',
      model: 'gpt',
      input: 'Just created',
      tools: [],
      metadata: {},
      idempotencyKey: null,
      requestHash: null,
    });
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).not.toContain(id);
    expect(taken.map((workflow) => workflow.id)).not.toContain(fresh);
    await h.testApp.services.database.pool.query(
      `UPDATE workflows SET status = 'cancelled', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL WHERE id = ANY($1)`,
      [[id, fresh]],
    );
  });
});
