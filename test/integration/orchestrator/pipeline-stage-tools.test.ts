import { describe, expect, it } from 'vitest';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { bearer } from '../../support/app.js';
import { pipelineRequests, planReply, stage } from '../../support/pipeline-http.js';
import { expectProblem } from '../../support/problems.js';
import {
  answer,
  offeredToolsOf,
  systemTextOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A plan stage's `tools`: the only tools its sub-agent is offered, checked
 * against the workflow's tools when planned and when a `modify` replaces
 * the stages not yet run.
 */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);

/** The user message of a request (a stage's), as the model read it. */
function userTextOf(request: RecordedRequest | undefined): string {
  const messages = (request?.body.messages ?? []) as { role: string; content: unknown }[];
  return JSON.stringify(messages.filter((message) => message.role === 'user'));
}

/** Starts a complex workflow on `plan` and `replies` and waits until it stops moving. */
async function runPlan(question: string, stages: Record<string, unknown>[], replies: string[]) {
  const before = h.provider.requests.length;
  h.provider.enqueue(planReply(...stages), ...replies.map(answer));
  const id = await startWorkflow(h.testApp, h.tenant.key, { input: question, mode: 'complex' });
  const workflow = await waitForStatus(h.testApp, h.tenant.key, id, [
    'awaiting_input',
    'completed',
    'failed',
  ]);
  return { id, workflow, requests: h.provider.requests.slice(before) };
}

async function deleteTool(name: string): Promise<void> {
  const listed = await h.testApp.app.inject({
    method: 'GET',
    url: '/v1/tools',
    headers: bearer(h.tenant.key),
  });
  const tool = (listed.json().items as { id: string; name: string }[]).find(
    (item) => item.name === name,
  );
  const deleted = await h.testApp.app.inject({
    method: 'DELETE',
    url: `/v1/tools/${tool?.id}`,
    headers: bearer(h.tenant.key),
  });
  expect(deleted.statusCode, deleted.body).toBe(204);
}

describe('a stage’s tools', () => {
  it('a stage naming tools is offered only those; [] offers none; absent offers every one', async () => {
    const weather = await h.registerTool('/weather');
    const { workflow, requests } = await runPlan(
      'Stage tools: named, none, all',
      [stage('named', { tools: ['calculator'] }), stage('none', { tools: [] }), stage('all')],
      ['Result of named.', 'Result of none.', 'Result of all.', 'The answer.'],
    );
    expect(workflow).toMatchObject({ status: 'completed' });
    const [planner, named, none, all] = requests;
    // The planner was told what the stages may name.
    expect(JSON.stringify(planner?.body)).toContain(weather);
    expect(offeredToolsOf(named)).toEqual(['calculator']);
    expect(userTextOf(named)).toContain('Tools for this stage: calculator (only these).');
    expect(offeredToolsOf(none)).toEqual([]);
    expect(userTextOf(none)).toContain('Tools for this stage: none');
    // ask_user pauses, which a stage may not: every other tool.
    expect(offeredToolsOf(all).sort()).toEqual(['calculator', 'current_time', weather].sort());
    expect(userTextOf(all)).not.toContain('Tools for this stage');
  });

  it('a stage naming a tool deleted since the plan runs without it, with a warning on its step', async () => {
    const doomed = await h.registerTool('/weather');
    const paused = await runPlan(
      'Stage tools: one deleted at the checkpoint',
      [stage('a', { checkpoint: true }), stage('b', { tools: ['calculator', doomed] })],
      ['Result of a.'],
    );
    expect(paused.workflow).toMatchObject({ awaitingReason: 'checkpoint' });
    await deleteTool(doomed);

    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Result of b.'), answer('The answer.'));
    const continued = await act(paused.id, 'continue', { version: paused.workflow.version });
    expect(continued.statusCode, continued.body).toBe(202);
    const done = await waitForStatus(h.testApp, h.tenant.key, paused.id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed' });
    expect(offeredToolsOf(h.provider.requests[before])).toEqual(['calculator']);
    const warnings = (await storedEvents(h.testApp, paused.id)).filter(
      (event) => event.type === 'warning' && event.detail.code === 'requested_tools_unavailable',
    );
    expect(warnings).toEqual([
      expect.objectContaining({ step: 'b', detail: expect.objectContaining({ tools: [doomed] }) }),
    ]);
  });

  it('a modify plan naming a tool the workflow does not have is a 400 invalid_plan, and nothing changes', async () => {
    const paused = await runPlan(
      'Stage tools: modify with an unknown tool',
      [stage('a', { checkpoint: true }), stage('b')],
      ['Result of a.'],
    );
    const refused = await act(paused.id, 'modify', {
      feedback: 'Use the teleporter',
      plan: { stages: [stage('c', { tools: ['calculator', 'teleport'] })] },
      version: paused.workflow.version,
    });
    expectProblem(refused, 400, 'invalid_plan');
    expect(JSON.stringify(refused.json().errors)).toContain(
      'stages[0].tools[1]: unknown tool \\"teleport\\"',
    );
    const still = await waitForStatus(h.testApp, h.tenant.key, paused.id, ['awaiting_input']);
    expect(still.version).toBe(paused.workflow.version);

    // A known one is accepted and applied.
    h.provider.enqueue(answer('Result of a, again.'));
    const modified = await act(paused.id, 'modify', {
      feedback: 'Again',
      plan: { stages: [stage('c', { tools: ['current_time'] })] },
      version: paused.workflow.version,
    });
    expect(modified.statusCode, modified.body).toBe(202);
    const again = await waitForStatus(h.testApp, h.tenant.key, paused.id, ['awaiting_input']);
    const before = h.provider.requests.length;
    h.provider.enqueue(answer('Result of c.'), answer('The answer.'));
    expect((await act(paused.id, 'continue', { version: again.version })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, paused.id, ['completed']);
    expect(offeredToolsOf(h.provider.requests[before])).toEqual(['current_time']);
  });

  it('a tool that requires approval is offered to no stage, nor named to the planner, and a modify plan naming it is a 400', async () => {
    const guarded = await h.registerTool('/weather', { requiresApproval: true });
    const paused = await runPlan(
      'Stage tools: one requires approval',
      [stage('a', { checkpoint: true }), stage('b')],
      ['Result of a.'],
    );
    const [planner, a] = paused.requests;
    expect(JSON.stringify(planner?.body)).not.toContain(guarded);
    expect(JSON.stringify(planner?.body)).toContain('calculator');
    expect(offeredToolsOf(a)).not.toContain(guarded);
    expect(offeredToolsOf(a)).toContain('calculator');
    expect(systemTextOf(a)).not.toContain(guarded);
    const refused = await act(paused.id, 'modify', {
      feedback: 'Use the guarded tool',
      plan: { stages: [stage('c', { tools: [guarded] })] },
      version: paused.workflow.version,
    });
    expectProblem(refused, 400, 'invalid_plan');
    expect(JSON.stringify(refused.json().errors)).toContain(`unknown tool \\"${guarded}\\"`);
    await deleteTool(guarded);
    expect((await act(paused.id, 'cancel')).statusCode).toBe(202);
  });

  it('no stage is offered ask_user, nor told of it in its prompt', async () => {
    const { workflow, requests } = await runPlan(
      'Stage tools: ask_user',
      [stage('only')],
      ['Result of only.', 'The answer.'],
    );
    expect(workflow).toMatchObject({ status: 'completed' });
    const [, only, synthesis] = requests;
    expect(offeredToolsOf(only)).not.toContain('ask_user');
    expect(systemTextOf(only)).not.toContain('ask_user');
    expect(systemTextOf(synthesis)).not.toContain('ask_user');
    // A simple workflow of the same tenant is offered it, and told when to use it.
    h.provider.enqueue(answer('Simple.'));
    const simple = await h.run('Simple: which tools?', 'gpt', { mode: 'simple' });
    expect(offeredToolsOf(simple.requests[0])).toContain('ask_user');
    expect(systemTextOf(simple.requests[0])).toContain('Use ask_user only when');
  });
});
