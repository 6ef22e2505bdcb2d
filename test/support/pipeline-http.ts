import { expect } from 'vitest';
import type { FakeResponse } from '../fakes/provider-types.js';
import { bearer } from './app.js';
import { answer, type ToolLoopHarness } from './tool-loop-harness.js';

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
    /** `POST /v1/workflows/:id/<action>` (continue, modify, retry, cancel). */
    act(id: string, action: string, body: Record<string, unknown> = {}) {
      const h = harness();
      return h.testApp.app.inject({
        method: 'POST',
        url: `/v1/workflows/${id}/${action}`,
        headers: bearer(h.tenant.key),
        payload: body,
      });
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
