import { describe, expect, it, vi } from 'vitest';
import { parseTurnState } from '../../../src/orchestrator/tool-loop/state.js';
import { loadLoopHistory } from '../../../src/orchestrator/tool-loop/turns-repository.js';
import {
  answer,
  callsTo,
  MAX_ITERATIONS,
  toolChoiceOf,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  cancelWorkflow,
  getWorkflow,
  startWorkflow,
  storedEvents,
} from '../../support/workflows.js';

/**
 * The tool loop through the real OpenAI and Anthropic SDKs against the fake
 * provider server, with HTTP tools on a local tool server: tool calls and
 * their results, parallel and sequential tools, the iteration cap, the
 * repeat-fail guard, timeouts, invalid arguments and the persisted turns.
 */

const h = useToolLoopHarness();

describe.each(['gpt', 'claude'])('the tool loop on %s', (model) => {
  it('a single calculator call, then the answer; events in order with gap-free seqs; turns persisted', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calculator', arguments: { expression: '6 * 7' } }),
      answer('It is 42.'),
    );
    const { id, workflow, events } = await h.run('What is six times seven?', model);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
    expect(events.map((event) => [event.type, event.status])).toEqual([
      ['workflow_start', 'started'],
      ['classification', 'completed'],
      ['llm_call', 'started'],
      ['llm_call', 'completed'],
      ['tool_call', 'started'],
      ['tool_call', 'completed'],
      ['llm_call', 'started'],
      ['llm_call', 'completed'],
      ['answer', 'completed'],
      ['usage', 'info'],
      ['workflow_end', 'completed'],
    ]);
    expect(events.map((event) => event.seq)).toEqual(events.map((_event, index) => index + 1));
    const toolDone = events.find(
      (event) => event.type === 'tool_call' && event.status === 'completed',
    );
    expect(toolDone).toMatchObject({ step: 'turn-1', detail: { tool: 'calculator' } });
    expect(toolDone?.elapsed_ms).toEqual(expect.any(Number));

    const { rows } = await h.testApp.services.database.pool.query(
      'SELECT turn, state FROM workflow_turns WHERE workflow_id = $1 ORDER BY turn',
      [id],
    );
    expect(rows.map((row) => row.turn)).toEqual([1, 2]);
    const [first, second] = rows.map((row) => parseTurnState(row.state));
    expect(first?.assistant.toolCalls).toMatchObject([{ name: 'calculator' }]);
    expect(first?.toolResults[0]).toMatchObject({ toolName: 'calculator', isError: false });
    expect(first?.toolResults[0]?.content).toContain('42');
    expect(second).toMatchObject({ assistant: { content: 'It is 42.', toolCalls: [] } });
    const history = await loadLoopHistory(h.testApp.services.database.db, {
      tenantId: h.tenant.id,
      workflowId: id,
    });
    expect(history.messages.map((message) => message.role)).toEqual([
      'assistant',
      'tool',
      'assistant',
    ]);
  });

  it('parallel tool calls overlap in time; sequential ones run one at a time', async () => {
    const parallelA = await h.registerTool('/slow/pa');
    const parallelB = await h.registerTool('/slow/pb');
    const sequentialA = await h.registerTool('/slow/sa', { sequential: true });
    const sequentialB = await h.registerTool('/slow/sb', { sequential: true });
    h.provider.enqueue(
      callsTo(
        { name: sequentialA, arguments: {} },
        { name: parallelA, arguments: {} },
        { name: sequentialB, arguments: {} },
        { name: parallelB, arguments: {} },
      ),
      answer('Done.'),
    );
    const { workflow, requests } = await h.run('Use the tools', model);
    expect(workflow.status).toBe('completed');
    const [pa, pb, sa, sb] = ['/slow/pa', '/slow/pb', '/slow/sa', '/slow/sb'].map((path) => {
      const timing = h.timings.get(path);
      if (!timing) throw new Error(`${path} was not called`);
      return timing;
    }) as [
      { start: number; end: number },
      { start: number; end: number },
      { start: number; end: number },
      { start: number; end: number },
    ];
    expect(pa.start < pb.end && pb.start < pa.end).toBe(true);
    expect(sa.end).toBeLessThanOrEqual(sb.start);
    for (const other of [pa, pb]) expect(other.end).toBeLessThanOrEqual(sa.start);
    // Results go back in the order of the calls.
    const results = toolResultsOf(requests.at(-1));
    expect(results.map((result) => result.content.match(/\/slow\/\w+/)?.[0])).toEqual([
      '/slow/sa',
      '/slow/pa',
      '/slow/sb',
      '/slow/pb',
    ]);
  });

  it('at the iteration cap, a warning and one last turn without tools give a best-effort answer', async () => {
    for (let turn = 1; turn <= MAX_ITERATIONS; turn++) {
      h.provider.enqueue(callsTo({ name: 'calculator', arguments: { expression: `${turn} + 1` } }));
    }
    h.provider.enqueue(answer('Best effort: 5.'));
    const { workflow, events, requests } = await h.run('Keep calculating', model);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Best effort: 5.' } });
    expect(
      events.filter((event) => event.type === 'llm_call' && event.status === 'started'),
    ).toHaveLength(MAX_ITERATIONS + 1);
    const warning = events.find((event) => event.type === 'warning');
    expect(warning?.detail).toMatchObject({ code: 'iteration_cap', maxIterations: MAX_ITERATIONS });
    expect(toolChoiceOf(requests.at(-1))).toBe('none');
  });

  it('a call failing identically twice is warned about, and the third identical attempt is blocked', async () => {
    const failing = await h.registerTool('/fail');
    const before = h.tools.calls.filter((call) => call.path === '/fail').length;
    for (let turn = 1; turn <= 3; turn++) {
      h.provider.enqueue(callsTo({ name: failing, arguments: { city: 'Oslo' } }));
    }
    h.provider.enqueue(answer('The station is down.'));
    const { workflow, events, requests } = await h.run('Weather in Oslo?', model);
    expect(workflow.status).toBe('completed');
    expect(h.tools.calls.filter((call) => call.path === '/fail').length - before).toBe(2);
    const failed = events.filter(
      (event) => event.type === 'tool_call' && event.status === 'failed',
    );
    expect(
      failed.map((event) => [event.detail.repeatWarning ?? false, event.detail.blocked ?? false]),
    ).toEqual([
      [false, false],
      [true, false],
      [false, true],
    ]);
    const results = toolResultsOf(requests.at(-1));
    expect(results.at(-1)?.content).toMatch(/Blocked/);
    expect(results.at(-2)?.content).toMatch(/failed twice/);
  });

  it('a tool past its timeout returns an error result and the loop goes on', async () => {
    const hanging = await h.registerTool('/hang', { timeoutMs: 200 });
    h.provider.enqueue(callsTo({ name: hanging, arguments: {} }), answer('It did not answer.'));
    const { workflow, events, requests } = await h.run('Call the slow tool', model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'It did not answer.' },
    });
    expect(
      events.find((event) => event.type === 'tool_call' && event.status === 'failed'),
    ).toMatchObject({
      detail: { tool: hanging },
    });
    expect(toolResultsOf(requests.at(-1))[0]?.content).toMatch(/status="error"/);
  });

  it('a cancel while a tool runs aborts the tool’s request at once and ends the call as cancelled in the log; no turn with an unanswered call is kept and the model is not called again', async () => {
    const hanging = await h.registerTool('/hang', { timeoutMs: 60_000 });
    h.timings.delete('/hang');
    const hangsBefore = h.tools.calls.filter((call) => call.path === '/hang').length;
    const before = h.provider.requests.length;
    h.provider.enqueue(
      callsTo(
        { id: 'call_hang', name: hanging, arguments: {} },
        { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
      ),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Wait for it', model });
    await vi.waitFor(
      () =>
        expect(h.tools.calls.filter((call) => call.path === '/hang')).toHaveLength(hangsBefore + 1),
      { timeout: 10_000 },
    );
    // Its start is in the log (progress is written in batches), so the cancel finds it open.
    await vi.waitFor(
      async () =>
        expect(
          (await storedEvents(h.testApp, id)).some(
            (event) => event.type === 'tool_call' && event.detail.callId === 'call_hang',
          ),
        ).toBe(true),
      { timeout: 10_000 },
    );
    const cancelled = await cancelWorkflow(h.testApp, h.tenant.key, id);
    expect(cancelled.statusCode, cancelled.body).toBe(202);
    // The tool's request is given up long before its minute-long timeout.
    await vi.waitFor(() => expect(h.timings.get('/hang')).toBeDefined(), { timeout: 5_000 });
    await vi.waitFor(() => expect(h.testApp.services.executions.isRunning(id)).toBe(false), {
      timeout: 10_000,
    });
    expect(h.provider.requests.length - before).toBe(1);
    const { rows } = await h.testApp.services.database.pool.query(
      'SELECT turn FROM workflow_turns WHERE workflow_id = $1',
      [id],
    );
    expect(rows).toEqual([]);
    const events = await storedEvents(h.testApp, id);
    expect(events.at(-1)).toMatchObject({ type: 'workflow_end', status: 'cancelled' });
    // The hanging call, started in the log, ends there with the cancel: every call in the log ends once.
    const toolEvents = events.filter((event) => event.type === 'tool_call');
    for (const callId of new Set(toolEvents.map((event) => event.detail.callId))) {
      const statuses = toolEvents
        .filter((event) => event.detail.callId === callId)
        .map((event) => event.status);
      expect(statuses).toHaveLength(2);
      expect(statuses[0]).toBe('started');
      expect(['completed', 'failed']).toContain(statuses[1]);
    }
    expect(events.slice(-3)).toMatchObject([
      {
        type: 'tool_call',
        status: 'failed',
        detail: { callId: 'call_hang', tool: hanging, error: 'cancelled' },
      },
      // The turn's model call, which the cancelled run never counted.
      { type: 'usage', detail: { inputTokens: 10, outputTokens: 5 } },
      { type: 'workflow_end', status: 'cancelled' },
    ]);
    expect((await getWorkflow(h.testApp, h.tenant.key, id)).status).toBe('cancelled');
  });

  it('invalid tool-call JSON goes back to the model as an error result', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calculator', arguments: '{"expression": ' }),
      answer('Sorry, let me answer directly.'),
    );
    const { workflow, events, requests } = await h.run('Compute something', model);
    expect(workflow.status).toBe('completed');
    expect(events.find((event) => event.type === 'tool_call')).toMatchObject({
      status: 'failed',
      detail: { tool: 'calculator', error: 'invalid_arguments' },
    });
    expect(toolResultsOf(requests.at(-1))[0]?.content).toMatch(/could not be used/);
  });

  it('a lone surrogate from the model: in tool arguments an invalid call it is told about; in its answer repaired to U+FFFD (PostgreSQL refuses it in jsonb: the workflow failed)', async () => {
    h.provider.enqueue(
      callsTo({ name: 'calculator', arguments: '{"expression": "1 + \\ud800"}' }),
      answer('Half a smile: \ud83d'),
    );
    const { workflow, events, requests } = await h.run('Smile', model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Half a smile: \ufffd' },
    });
    expect(events.find((event) => event.type === 'tool_call')).toMatchObject({
      status: 'failed',
      detail: { tool: 'calculator', error: 'invalid_arguments' },
    });
    expect(toolResultsOf(requests.at(-1))[0]?.content).toMatch(/not valid Unicode/);
  });

  it('a NUL from the model: in tool arguments (escaped, or raw in the argument text) an invalid call; in its answer U+FFFD (PostgreSQL refuses NUL: the workflow failed)', async () => {
    h.provider.enqueue(
      callsTo(
        { name: 'calculator', arguments: '{"expression": "1 + \\u0000"}' },
        { name: 'calculator', arguments: '{"expression": "1\u0000"}' },
      ),
      answer('Nothing\u0000here'),
    );
    const { workflow, events, requests } = await h.run('Nothing', model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Nothing\ufffdhere' },
    });
    const failed = events.filter(
      (event) => event.type === 'tool_call' && event.status === 'failed',
    );
    expect(failed.map((event) => event.detail.error)).toEqual([
      'invalid_arguments',
      'invalid_arguments',
    ]);
    expect(
      toolResultsOf(requests.at(-1))
        .map((result) => result.content)
        .join('\n'),
    ).toMatch(/NUL character/);
  });
});

describe('the tool loop on claude: blank text', () => {
  it('a turn whose text is only whitespace before its tool call comes back without a text block (Anthropic refuses blank ones)', async () => {
    h.provider.enqueue(
      {
        kind: 'reply',
        chunks: ['\n\n'],
        toolCalls: [{ name: 'calculator', arguments: { expression: '6 * 7' } }],
      },
      answer('It is 42.'),
    );
    const { workflow, requests } = await h.run('What is six times seven?', 'claude');
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'It is 42.' } });
    expect(requests).toHaveLength(2);
    const messages = requests[1]?.body.messages as { role: string; content: { type: string }[] }[];
    expect(messages.map((message) => message.content.map((block) => block.type))).toEqual([
      ['text'],
      ['tool_use'],
      ['tool_result'],
    ]);
  });
});
