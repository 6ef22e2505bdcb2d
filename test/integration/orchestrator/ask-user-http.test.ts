import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../support/app.js';
import { eventually, listen, openStream, within } from '../../support/event-streams.js';
import {
  answer,
  callsTo,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';

/**
 * ask_user end to end over real sockets, on both vendors' SDKs: a client
 * starts a workflow with fetch and follows it with the `eventsource`
 * package; the model asks a question, the stream shows the
 * clarification_request and stays open while the workflow waits; the
 * client answers with fetch, and the same stream carries the rest of the
 * run to its end.
 */

const h = useToolLoopHarness();
let baseUrl: string;
beforeAll(async () => {
  baseUrl = await listen(h.testApp);
});
afterAll(async () => {
  // Streams aborted by their clients leave idle sockets that would hold close() open.
  h.testApp?.app.server.closeAllConnections();
});

function post(path: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { ...bearer(h.tenant.key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

describe.each(['gpt', 'claude'])('ask_user over HTTP and SSE on %s', (model) => {
  it('the question arrives on the stream, the answer is posted, and the same stream carries the run to its end', async () => {
    const before = h.provider.requests.length;
    h.provider.enqueue(
      callsTo({
        id: 'call_size',
        name: 'ask_user',
        arguments: {
          question: 'Small or large?',
          question_type: 'multiple_choice',
          options: ['Small', 'Large'],
          context: 'The order needs a size.',
        },
      }),
      answer('A large one it is.'),
    );
    const created = await post('/v1/workflows', { input: 'Order a coffee', model });
    expect(created.status).toBe(202);
    const { id } = (await created.json()) as { id: string };
    const stream = openStream(`${baseUrl}/v1/workflows/${id}/events`, { key: h.tenant.key });
    try {
      await eventually(
        () => stream.events.some((event) => event.type === 'clarification_request'),
        10_000,
        'the clarification_request on the stream',
      );
      const question = stream.events.find((event) => event.type === 'clarification_request');
      expect(question).toMatchObject({
        status: 'paused',
        detail: {
          question: 'Small or large?',
          question_type: 'multiple_choice',
          options: ['Small', 'Large'],
          context: 'The order needs a size.',
        },
      });

      const waiting = await fetch(`${baseUrl}/v1/workflows/${id}`, {
        headers: bearer(h.tenant.key),
      });
      const paused = (await waiting.json()) as { status: string; version: number };
      expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });

      const refused = await post(`/v1/workflows/${id}/answer`, { answer: 'Medium' });
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);

      const accepted = await post(`/v1/workflows/${id}/answer`, {
        answer: 'large',
        version: paused.version,
      });
      expect(accepted.status, await accepted.clone().text()).toBe(202);

      await within(stream.ended, 10_000, 'workflow_end on the same stream');
      expect(stream.connections()).toBe(1);
      const types = stream.events.map((event) => event.type);
      expect(types.slice(types.indexOf('clarification_request'))).toEqual([
        'clarification_request',
        // The usage so far, with the pause.
        'usage',
        'clarification_answer',
        'llm_call',
        'llm_call',
        'answer',
        'usage',
        'workflow_end',
      ]);
      expect(stream.events.map((event) => event.seq)).toEqual(
        stream.events.map((_event, index) => index + 1),
      );
      expect(stream.events.at(-1)).toMatchObject({
        status: 'completed',
        detail: { reason: 'answered' },
      });
      expect(stream.events.find((event) => event.type === 'answer')?.detail).toMatchObject({
        text: 'A large one it is.',
      });

      const again = await post(`/v1/workflows/${id}/answer`, { answer: 'Small' });
      expect(again.status).toBe(409);
      expect(((await again.json()) as { code: string }).code).toBe('not_awaiting_input');

      // The model got the answer as the question's result, the option as it was spelled.
      const requests = h.provider.requests.slice(before);
      expect(requests).toHaveLength(2);
      expect(toolResultsOf(requests[1])).toEqual([
        { callId: 'call_size', content: 'The user answered: Large' },
      ]);
    } finally {
      stream.close();
    }
  });
});
