import { beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../support/app.js';
import {
  answer,
  callsTo,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A tenant's HTTP tools called by the model in the tool loop, on both
 * vendors' SDKs, against the local tool server (127.0.0.1): the request
 * the tool server receives, and a replica that does not allow private
 * addresses refusing the call. Timeouts are in tool-loop.test.ts; the
 * tool's HTTP details (redirects, sizes, resolution) in
 * tools/http-tool.test.ts.
 */

const h = useToolLoopHarness();
/** A replica on the same database with the default policy: no loopback or private addresses. */
let strict: TestApp;
/**
 * Each test's tool (by test and model), all registered before anything
 * runs: a tool registered on one replica between two workflows of another
 * would make that one's next early start superseded, its request to the
 * fake wasted (see workflows/early-start.ts), and the scripted replies out
 * of step.
 */
const tools = new Map<string, { name: string; path: string }>();
function toolFor(test: 'echo' | 'private', model: string): { name: string; path: string } {
  const tool = tools.get(`${test}-${model}`);
  if (!tool) throw new Error(`no ${test} tool for ${model}`);
  return tool;
}
beforeAll(async () => {
  strict = await h.startReplica({ HTTP_TOOLS_ALLOW_PRIVATE: 'false' });
  for (const key of ['echo-gpt', 'echo-claude', 'private-gpt', 'private-claude']) {
    const path = `/slow/${key}`;
    tools.set(key, { name: await h.registerTool(path), path });
  }
});

describe.each(['gpt', 'claude'])('HTTP tools in the tool loop on %s', (model) => {
  it('the tool server gets the arguments as JSON with an Idempotency-Key of workflow, step and call; its answer goes back to the model', async () => {
    const { name: tool, path } = toolFor('echo', model);
    h.provider.enqueue(
      callsTo({ id: 'call_weather', name: tool, arguments: { city: 'Oslo' } }),
      answer('Oslo is fine.'),
    );
    const { id, workflow, requests } = await h.run('Weather in Oslo?', model);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Oslo is fine.' } });
    const received = h.tools.calls.filter((call) => call.path === path);
    expect(received).toHaveLength(1);
    expect(received[0]).toMatchObject({
      method: 'POST',
      headers: {
        'content-type': expect.stringMatching(/^application\/json/),
        'idempotency-key': `${id}:turn-1:call_weather`,
      },
    });
    expect(JSON.parse(received[0]?.body ?? '')).toEqual({ city: 'Oslo' });
    const [result] = toolResultsOf(requests[1]);
    expect(result).toMatchObject({ callId: 'call_weather' });
    expect(result?.content).toContain(path);
  });

  it('a replica that does not allow private addresses refuses the call: the model gets the refusal, the tool server nothing', async () => {
    const { name: tool, path } = toolFor('private', model);
    const before = h.provider.requests.length;
    h.provider.enqueue(
      callsTo({ id: 'call_private', name: tool, arguments: { city: 'Oslo' } }),
      answer('The tool is out of reach.'),
    );
    const id = await startWorkflow(strict, h.tenant.key, { input: 'Weather in Oslo?', model });
    const workflow = await waitForStatus(strict, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'The tool is out of reach.' },
    });
    expect(h.tools.calls.filter((call) => call.path === path)).toHaveLength(0);
    const failed = (await storedEvents(strict, id)).find(
      (event) => event.type === 'tool_call' && event.status === 'failed',
    );
    expect(failed).toMatchObject({ step: 'turn-1', detail: { tool, callId: 'call_private' } });
    const [result] = toolResultsOf(h.provider.requests[before + 1]);
    expect(result?.callId).toBe('call_private');
    expect(result?.content).toMatch(/refused: 127\.0\.0\.1 is a loopback address/);
  });
});
