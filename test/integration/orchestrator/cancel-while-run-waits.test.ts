import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A run launched by a review while the workflow's previous run on this
 * replica is still unwinding waits for it (executor.ts startAfter). A
 * cancel made meanwhile stops that run too: the workflow is cancelled, so
 * no further model call is made for it.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);

describe('cancel while the resumed run waits for the previous one to unwind', () => {
  it('the waiting run makes no model call for the cancelled workflow', async () => {
    h.provider.enqueue(
      planReply(stage('a', { checkpoint: true }), stage('b')),
      answer('Result of a.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Compare', mode: 'complex' });
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused.status).toBe('awaiting_input');
    // The run that paused it may still be registered here a moment after the pause is visible.
    await vi.waitFor(() => expect(h.testApp.services.executions.get(id)).toBeUndefined());

    // The previous run of this workflow here is still unwinding (closing its MCP sessions, say).
    let unwound!: () => void;
    const previous = {
      workflowId: id,
      stop: () => undefined,
      stopBeforeNextStep: () => undefined,
      done: new Promise<void>((resolve) => {
        unwound = resolve;
      }),
    };
    expect(h.testApp.services.executions.add(previous)).toBe(true);

    h.provider.enqueue(answer('Result of b.'), answer('Final.'));
    const before = h.provider.requests.length;
    expect((await act(id, 'continue')).statusCode).toBe(202);
    const cancelled = await act(id, 'cancel');
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    unwound();
    await sleep(1_500);

    const afterCancel = h.provider.requests.length - before;
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled', 'completed']);
    expect(workflow.status).toBe('cancelled');
    const events = await storedEvents(h.testApp, id);
    expect(events.at(-1)?.type).toBe('workflow_end');
    expect(afterCancel, 'model calls made for a cancelled workflow').toBe(0);
  });
});
