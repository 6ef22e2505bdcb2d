import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, waitForStatus } from '../../support/workflows.js';

/**
 * A model answer that runs past its size bound (maxOutputTokens x 64
 * characters) fails its attempt while the adapter is paused midway: the
 * adapter's stream is ended, so its own cleanup runs and its idle
 * watchdog's interval is cleared, rather than left for the life of the
 * process, one per such call.
 */

const h = useToolLoopHarness({ env: { LLM_BREAKER_THRESHOLD: '1000' } });

interface Tracked {
  timer: NodeJS.Timeout;
  watchdog: boolean;
}
let tracked: Tracked[] = [];
const realSetInterval = globalThis.setInterval;

beforeEach(() => {
  tracked = [];
  globalThis.setInterval = ((...args: Parameters<typeof setInterval>) => {
    const timer = realSetInterval(...args);
    const stack = new Error().stack ?? '';
    tracked.push({ timer, watchdog: stack.includes('idle-watchdog') });
    return timer;
  }) as typeof setInterval;
});
afterEach(() => {
  globalThis.setInterval = realSetInterval;
  // Don't let the leaked intervals hold the test process.
  for (const { timer } of tracked) clearInterval(timer);
});

const live = () =>
  tracked.filter((t) => t.watchdog && !(t.timer as unknown as { _destroyed: boolean })._destroyed)
    .length;

// 256 max output tokens x 64 characters = 16,384: the second chunk passes it.
const tooLong = (): Parameters<typeof h.provider.enqueue>[0] => ({
  kind: 'reply',
  chunks: ['x'.repeat(9_000), 'y'.repeat(9_000), 'z'],
});

describe.each(['gpt', 'claude'])('an oversized answer on %s', (model) => {
  it('leaves no idle-watchdog interval running once its workflows failed', async () => {
    const N = 10;
    for (let i = 0; i < N; i++) {
      h.provider.enqueue(tooLong());
      const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Say a lot', model });
      const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
      expect(done).toMatchObject({ status: 'failed', error: { code: 'llm_stream_interrupted' } });
    }
    // A normal call afterwards, whose watchdog stops: the count is the oversized ones only.
    h.provider.enqueue(answer('short'));
    const ok = await startWorkflow(h.testApp, h.tenant.key, { input: 'Say little', model });
    await waitForStatus(h.testApp, h.tenant.key, ok, ['completed']);
    expect(tracked.filter((t) => t.watchdog).length).toBeGreaterThanOrEqual(N);
    expect(live()).toBe(0);
  });
});
