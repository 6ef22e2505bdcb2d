import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  answer,
  callsTo,
  toolCallIdsOf,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  answerToEnd,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * The bounds on one turn's tool calls, through the real SDKs against the
 * fake provider server: calls past TOOL_CALLS_MAX_PER_TURN are answered
 * without running, and at most TOOL_CALLS_CONCURRENCY of a turn's parallel
 * calls run at once.
 */

const MAX_PER_TURN = 5;
const CONCURRENCY = 2;

const h = useToolLoopHarness({
  maxIterations: 10,
  env: {
    TOOL_CALLS_MAX_PER_TURN: String(MAX_PER_TURN),
    TOOL_CALLS_CONCURRENCY: String(CONCURRENCY),
  },
});

const calls = (path: string) => h.tools.calls.filter((call) => call.path === path).length;

describe.each(['gpt', 'claude'])('the tool-call cap on %s', (model) => {
  it('a turn of 8 calls over a cap of 5 runs the first 5; the others, a question and an invalid call among them, each get an error result and one warning says so', async () => {
    const path = `/counted/${randomUUID().slice(0, 8)}/10`;
    const tool = await h.registerTool(path);
    const id = (n: number) => `c${n}_${randomUUID().slice(0, 8)}`;
    const ids = Array.from({ length: 8 }, (_unused, index) => id(index + 1));
    const made = [
      ...['a', 'b', 'c', 'd', 'e'].map((city, index) => ({
        id: ids[index],
        name: tool,
        arguments: { city },
      })),
      {
        id: ids[5],
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      },
      { id: ids[6], name: tool, arguments: { city: 'g' } },
      { id: ids[7], name: 'calculator', arguments: '{"expression": ' },
    ];
    h.provider.enqueue(callsTo(...made), answer('Done.'));
    const before = calls(path);
    const { workflow, events, requests } = await h.run('Use the tool', model);

    // The question past the cap did not pause the workflow.
    expect(workflow.status).toBe('completed');
    expect(calls(path) - before).toBe(MAX_PER_TURN);
    const next = requests.at(-1);
    if (!next) throw new Error('no request after the turn');
    expect(toolCallIdsOf(next)).toEqual(ids);
    const results = toolResultsOf(next);
    expect(results.map((result) => result.callId)).toEqual(ids);
    for (const result of results.slice(0, MAX_PER_TURN)) expect(result.content).toContain(path);
    for (const result of results.slice(MAX_PER_TURN)) {
      expect(result.content).toContain('Not run: this turn made more than 5 tool calls');
      expect(result.content).toContain('Make at most 5 calls per turn');
    }
    const started = events.filter((e) => e.type === 'tool_call' && e.status === 'started');
    expect(started.map((e) => e.detail.callId)).toEqual(
      expect.arrayContaining(ids.slice(0, MAX_PER_TURN)),
    );
    expect(started).toHaveLength(MAX_PER_TURN);
    expect(events.some((e) => e.type === 'clarification_request')).toBe(false);
    expect(events.filter((e) => e.type === 'warning')).toMatchObject([
      {
        step: 'turn-1',
        detail: { code: 'tool_call_cap', maxCallsPerTurn: MAX_PER_TURN, calls: 8 },
      },
    ]);
  });
});

describe('the tool-call cap', () => {
  it('calls past the cap count as no failure for the repeat-fail guard, after a pause too: a call refused twice past it still runs later', async () => {
    const failing = await h.registerTool('/fail');
    const before = calls('/fail');
    const capped = () =>
      callsTo(
        ...[1, 2, 3, 4, 5].map((n) => ({
          name: 'calculator',
          arguments: { expression: `${n} + 1` },
        })),
        { name: failing, arguments: { city: 'Oslo' } },
      );
    h.provider.enqueue(
      capped(),
      capped(),
      callsTo({
        id: 'q1',
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      }),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Weather in Oslo?' });
    const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused).toMatchObject({ status: 'awaiting_input' });

    // Resumed, the loop rebuilds the guard from the persisted turns.
    h.provider.enqueue(
      callsTo({ id: 'f3', name: failing, arguments: { city: 'Oslo' } }),
      answer('The station is down.'),
    );
    await answerToEnd(h.testApp, h.tenant.key, { id, answer: 'Oslo', version: paused.version });

    const events = await storedEvents(h.testApp, id);
    expect(calls('/fail') - before).toBe(1);
    expect(events.filter((e) => e.type === 'tool_call' && e.detail.tool === failing)).toMatchObject(
      [
        { status: 'started', detail: { callId: 'f3' } },
        { status: 'failed', detail: { callId: 'f3', error: 'failed' } },
      ],
    );
  });

  it(`with a concurrency of ${CONCURRENCY}, at most ${CONCURRENCY} of a turn's 5 parallel calls are in flight at once, and their results come back in the model's order`, async () => {
    const prefix = `/counted/${randomUUID().slice(0, 8)}`;
    // Ends out of the model's order: the first call is the slowest.
    const paths = [300, 50, 200, 50, 100].map((ms, index) => `${prefix}-${index}/${ms}`);
    const tools = await Promise.all(paths.map((path) => h.registerTool(path)));
    h.provider.enqueue(callsTo(...tools.map((name) => ({ name, arguments: {} }))), answer('Done.'));
    h.inFlight.most = 0;
    const { workflow, requests } = await h.run('Use the tools');
    expect(workflow.status).toBe('completed');
    expect(paths.map(calls)).toEqual([1, 1, 1, 1, 1]);
    expect(h.inFlight.most).toBe(CONCURRENCY);
    const results = toolResultsOf(requests.at(-1));
    expect(results.map((result) => result.content.match(/\/counted\/[\w-]+\/\d+/)?.[0])).toEqual(
      paths,
    );
  });
});
