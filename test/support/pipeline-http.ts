import { expect } from 'vitest';
import type { FakeResponse } from '../fakes/provider-types.js';
import { bearer } from './app.js';
import { answer, type ToolLoopHarness } from './tool-loop-harness.js';
import { startWorkflow, storedEvents, waitFor, waitForStatus } from './workflows.js';

/**
 * The complex path over HTTP, as the pipeline's integration tests drive
 * it: plans the fake provider answers with, and a workflow's review
 * actions and pipeline view.
 */

/** A plan stage, `Stage <id>` doing `Do <id>`, with `extra` fields (checkpoint, expectedOutput). */
export const stage = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  title: `Stage ${id}`,
  goal: `Do ${id}`,
  ...extra,
});

/** The planner's reply with these stages. */
export const planReply = (...stages: Record<string, unknown>[]): FakeResponse =>
  answer(JSON.stringify({ stages }));

/** Requests on the harness `harness()` returns (one a test file starts in its beforeAll). */
export function pipelineRequests(harness: () => ToolLoopHarness) {
  return {
    /** `POST /v1/workflows/:id/<action>` (continue, modify, retry, cancel, answer). */
    act(
      id: string,
      action: string,
      body: Record<string, unknown> = {},
      headers: Record<string, string> = {},
    ) {
      const h = harness();
      return h.testApp.app.inject({
        method: 'POST',
        url: `/v1/workflows/${id}/${action}`,
        headers: { ...bearer(h.tenant.key), ...headers },
        payload: body,
      });
    },

    /**
     * A pipeline paused at its checkpoint, stage b: a, b, c unless `after`
     * says which stages follow b. The fake provider has nothing left queued.
     */
    async pausedAtCheckpoint(question: string, after: string[] = ['c']) {
      const h = harness();
      h.provider.enqueue(
        planReply(stage('a'), stage('b', { checkpoint: true }), ...after.map((id) => stage(id))),
        answer('Result of a.'),
        answer('Result of b.'),
      );
      const id = await startWorkflow(h.testApp, h.tenant.key, { input: question, mode: 'complex' });
      const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
        'awaiting_input',
        'failed',
        'completed',
      ]);
      expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'checkpoint' });
      return { id, version: paused.version as number };
    },

    /**
     * Starts a complex workflow whose model calls get `replies` and then a
     * reply that stalls; resolves once that call is made: its request
     * received by the fake and its `llm_call` event (step `step`, the
     * stalled stage's `<stage>/turn-1`) stored, and with it the stage's row
     * and `started` event, written before.
     */
    async stalledAt(input: string, replies: FakeResponse[], step: string): Promise<string> {
      const h = harness();
      const before = h.provider.requests.length;
      h.provider.enqueue(...replies, { kind: 'stall' });
      const id = await startWorkflow(h.testApp, h.tenant.key, { input, mode: 'complex' });
      await waitFor(async () => {
        const events = await storedEvents(h.testApp, id);
        return h.provider.requests.length > before + replies.length &&
          events.some((event) => event.type === 'llm_call' && event.step === step)
          ? true
          : undefined;
      }, `${step} to call the model`);
      return id;
    },

    /** `GET /v1/workflows/:id/pipeline`, which must answer 200. */
    async pipelineOf(id: string) {
      const h = harness();
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows/${id}/pipeline`,
        headers: bearer(h.tenant.key),
      });
      expect(response.statusCode, response.body).toBe(200);
      return response.json();
    },
  };
}
