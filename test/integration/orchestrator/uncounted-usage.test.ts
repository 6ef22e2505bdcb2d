import { describe, expect, it, vi } from 'vitest';
import type { FakeReply, FakeResponse } from '../../fakes/provider-types.js';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import {
  answer,
  callsTo,
  toolChoiceOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  handOver,
  startWorkflow,
  storedEvents,
  takeOverToEnd,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * What a run that never ends itself spent is not lost: each model call's
 * event carries its usage. The run taking a workflow over after a
 * hand-over (or a crash) counts the calls no pause or end added to the
 * workflow's usage, against its budget and in its usage; a cancel counts
 * those of the run it stops. Every reply here uses 120 tokens (100 in, 20
 * out).
 */

const h = useToolLoopHarness({ maxIterations: 10 });
const { stalledAt } = pipelineRequests(() => h);
const usage = { input: 100, output: 20 };

/** A reply of the fake (callsTo, answer, planReply make one) using `usage`. */
function spending(response: FakeResponse): FakeReply {
  if (response.kind !== 'reply') throw new Error('only a reply reports usage');
  return { ...response, usage };
}

/**
 * Starts a simple workflow whose first turn calls the calculator and whose
 * second calls a tool that never answers, each turn's reply using `usage`;
 * resolves once that tool is called.
 */
async function stalledInItsSecondTurn(body: Record<string, unknown>): Promise<string> {
  const hanging = await h.registerTool('/hang', { timeoutMs: 60_000 });
  const hangsBefore = h.tools.calls.filter((call) => call.path === '/hang').length;
  h.provider.enqueue(
    spending(callsTo({ name: 'calculator', arguments: { expression: '1 + 1' } })),
    spending(callsTo({ name: hanging, arguments: {} })),
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, { mode: 'simple', ...body });
  await vi.waitFor(
    () =>
      expect(h.tools.calls.filter((call) => call.path === '/hang')).toHaveLength(hangsBefore + 1),
    { timeout: 10_000 },
  );
  return id;
}

describe('usage no run counted', () => {
  it('tool loop: the turns of the run handed over count against the token cap and in the usage', async () => {
    // 240 tokens in the first run's two turns.
    const id = await stalledInItsSecondTurn({ input: 'Keep working', budget: { maxTokens: 300 } });
    await handOver(h.testApp, id);

    // After the takeover: a third turn (360 tokens, past the cap of 300), then the best-effort turn.
    const before = h.provider.requests.length;
    h.provider.enqueue(
      spending(callsTo({ name: 'calculator', arguments: { expression: '2 + 2' } })),
      spending(answer('Best effort after the takeover.')),
    );
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    const requests = h.provider.requests.slice(before);
    const events = await storedEvents(h.testApp, id);
    expect(done).toMatchObject({
      result: { reason: 'token_budget' },
      usage: { inputTokens: 400, outputTokens: 80 },
    });
    expect(events.filter((event) => event.type === 'warning').map((event) => event.detail)).toEqual(
      [expect.objectContaining({ code: 'token_budget', maxTokens: 300, tokens: 360 })],
    );
    expect(toolChoiceOf(requests.at(-1))).toBe('none');
    // Each model call's event says what it used; the one usage event counts all four.
    expect(
      events
        .filter((event) => event.type === 'llm_call' && event.status === 'completed')
        .map((event) => event.detail.usage),
    ).toEqual(
      Array(4).fill({ inputTokens: 100, outputTokens: 20, cachedInputTokens: 0, costUsd: 0 }),
    );
    expect(events.filter((event) => event.type === 'usage').map((event) => event.detail)).toEqual([
      expect.objectContaining({ inputTokens: 400, outputTokens: 80 }),
    ]);
  });

  it('pipeline: the planner and the stage the run handed over had done count in the usage', async () => {
    const id = await stalledAt(
      'Compare, then hand over',
      [spending(planReply(stage('a'), stage('b'))), spending(answer('Result of a.'))],
      'b/turn-1',
    );
    await handOver(h.testApp, id);
    h.provider.enqueue(spending(answer('Result of b.')), spending(answer('Both done.')));
    const done = await takeOverToEnd(h.testApp, h.tenant.key, id);
    // Planner, a, then after the takeover b and the synthesis: 4 × 120 tokens.
    expect(done).toMatchObject({
      status: 'completed',
      usage: { inputTokens: 400, outputTokens: 80 },
    });
    const planning = (await storedEvents(h.testApp, id)).find(
      (event) => event.type === 'llm_call' && event.step === 'plan' && event.status === 'completed',
    );
    expect(planning?.detail.usage).toMatchObject({ inputTokens: 100, outputTokens: 20 });
  });

  it('a cancel: what the stopped run’s model calls used is in the cancelled workflow’s usage', async () => {
    const id = await stalledInItsSecondTurn({ input: 'Work until cancelled' });
    // Both model calls' events stored (progress is written within ~20 ms, later on a busy host).
    await waitFor(async () => {
      const calls = (await storedEvents(h.testApp, id)).filter(
        (event) => event.type === 'llm_call' && event.status === 'completed',
      );
      return calls.length === 2 ? true : undefined;
    }, 'both model calls stored');
    const cancelled = await h.testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/cancel`,
      headers: bearer(h.tenant.key),
    });
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    expect(done.usage).toMatchObject({ inputTokens: 200, outputTokens: 40 });
    const events = await storedEvents(h.testApp, id);
    expect(events.slice(-2)).toMatchObject([
      { type: 'usage', detail: { inputTokens: 200, outputTokens: 40 } },
      { type: 'workflow_end', status: 'cancelled' },
    ]);
  });
});
