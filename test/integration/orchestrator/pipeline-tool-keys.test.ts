import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import {
  eventStored,
  handOver,
  startWorkflow,
  takeOverToEnd,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * The Idempotency-Keys of a pipeline stage's tool calls. Models may number
 * their call ids per answer (`call_1` every time), so workflow, turn and
 * call id alone repeat: each stage, and each deliberate run of a stage
 * (the user's retry or modify, a validation retry), must have keys of its
 * own, or a tool server honouring them answers the re-run with the old
 * response instead of doing the work. A stage run again because a crash
 * cut it off repeats the calls the crash may have made: under the same
 * keys.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);

/** A tool at a path of its own, and the Idempotency-Keys its calls carried. */
async function keyedTool() {
  const path = `/keys/${randomUUID()}`;
  const name = await h.registerTool(path);
  return {
    name,
    /** The model's call of the tool under the id `call_1`, as a model numbering its calls makes it. */
    call: () => callsTo({ id: 'call_1', name, arguments: { city: 'Oslo' } }),
    keys: () =>
      h.tools.calls.filter((call) => call.path === path).map((c) => c.headers['idempotency-key']),
  };
}

async function settled(id: string) {
  return waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'completed', 'failed']);
}

describe('the Idempotency-Keys of a stage’s tool calls', () => {
  it('two stages calling a tool under the same call id in their first turn: each call has its own key', async () => {
    const tool = await keyedTool();
    h.provider.enqueue(
      planReply(stage('a'), stage('b')),
      tool.call(),
      answer('Result of a.'),
      tool.call(),
      answer('Result of b.'),
      answer('Both done.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Two stages, one tool',
      mode: 'complex',
    });
    expect(await settled(id)).toMatchObject({ status: 'completed' });
    expect(tool.keys()).toEqual([
      `${id}:a/attempt-1/turn-1:call_1`,
      `${id}:b/attempt-1/turn-1:call_1`,
    ]);
  });

  it('a stage run again by retry, then by modify: each run calls the tool under a new key', async () => {
    const tool = await keyedTool();
    h.provider.enqueue(
      planReply(stage('a', { checkpoint: true })),
      tool.call(),
      answer('Result of a.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'One stage, retried and modified',
      mode: 'complex',
    });
    const first = await settled(id);
    expect(first).toMatchObject({ awaitingReason: 'checkpoint' });

    h.provider.enqueue(tool.call(), answer('Result of a, again.'));
    expect((await act(id, 'retry', { version: first.version })).statusCode).toBe(202);
    const retried = await settled(id);
    expect(retried).toMatchObject({ awaitingReason: 'checkpoint' });

    h.provider.enqueue(tool.call(), answer('Result of a, in metric.'));
    const modified = await act(id, 'modify', { feedback: 'Metric', version: retried.version });
    expect(modified.statusCode, modified.body).toBe(202);
    expect(await settled(id)).toMatchObject({ awaitingReason: 'checkpoint' });

    expect(tool.keys()).toEqual([
      `${id}:a/attempt-1/turn-1:call_1`,
      `${id}:a/attempt-2/turn-1:call_1`,
      `${id}:a/attempt-3/turn-1:call_1`,
    ]);
    expect((await act(id, 'cancel')).statusCode).toBe(202);
  });

  it('a validation retry calls the tool under a new key, and so does the user’s retry after it', async () => {
    const tool = await keyedTool();
    h.provider.enqueue(
      planReply(stage('totals', { expectedOutput: { format: 'json', fields: ['total'] } })),
      tool.call(),
      answer('No JSON here.'),
      tool.call(),
      answer('Still none.'),
      tool.call(),
      answer('Nor here.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'Totals, validated',
      mode: 'complex',
    });
    const failed = await settled(id);
    expect(failed).toMatchObject({ awaitingReason: 'stage_failed' });

    h.provider.enqueue(tool.call(), answer('{"total": 7}'), answer('The total is 7.'));
    expect((await act(id, 'retry', { version: failed.version })).statusCode).toBe(202);
    expect(await settled(id)).toMatchObject({ status: 'completed' });

    expect(tool.keys()).toEqual(
      [1, 2, 3, 4].map((attempt) => `${id}:totals/attempt-${attempt}/turn-1:call_1`),
    );
  });

  it('a stage cut off after its tool call and run again by the run taking over: the call has the key it had', async () => {
    const tool = await keyedTool();
    h.provider.enqueue(
      planReply(stage('a'), stage('b')),
      tool.call(),
      // The stage's second turn never answers: the run is handed over during it.
      { kind: 'stall' },
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'A stage taken over',
      mode: 'complex',
    });
    // The tool has answered: the stage's next turn is under way.
    await eventStored(h.testApp, id, { type: 'llm_call', step: 'a/turn-2' });
    expect(tool.keys()).toHaveLength(1);
    await handOver(h.testApp, id);
    h.provider.enqueue(
      tool.call(),
      answer('Result of a.'),
      tool.call(),
      answer('Result of b.'),
      answer('Both done.'),
    );
    expect(await takeOverToEnd(h.testApp, h.tenant.key, id)).toMatchObject({
      status: 'completed',
    });
    // Stage a's second attempt re-runs the first: its call keeps the first's key.
    expect(tool.keys()).toEqual([
      `${id}:a/attempt-1/turn-1:call_1`,
      `${id}:a/attempt-1/turn-1:call_1`,
      `${id}:b/attempt-1/turn-1:call_1`,
    ]);
  });
});
