import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, listenLocally } from '../support/app.js';
import { pipelineRequests, planReply, stage } from '../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { createTenant, startWorkflow, waitForStatus } from '../support/workflows.js';

/**
 * `GET /v1/workflows/:id/trace` over real HTTP: the spans of a simple
 * workflow with a tool call, and of a pipeline through a checkpoint, a
 * retry and a continue, are whole and consistent; a running workflow's
 * show as open; another tenant's and an unknown id answer 404.
 */

const h = useToolLoopHarness();
const { act, pausedAtCheckpoint, stalledAt } = pipelineRequests(() => h);
let base = '';

beforeAll(async () => {
  base = (await listenLocally(h.testApp.app)).url;
});

interface WireSpan {
  id: number;
  parentId: number | null;
  kind: string;
  name: string;
  step: string | null;
  status: string;
  startSeq: number | null;
  endSeq: number | null;
  startedAt: string;
  endedAt: string | null;
  durationMs: number | null;
  attributes: Record<string, unknown>;
}

async function traceOf(id: string, key = h.tenant.key) {
  const response = await fetch(`${base}/v1/workflows/${id}/trace`, { headers: bearer(key) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function spansOf(id: string): Promise<WireSpan[]> {
  const { status, body } = await traceOf(id);
  expect(status, JSON.stringify(body)).toBe(200);
  expect(body.workflowId).toBe(id);
  return body.spans as WireSpan[];
}

/** What every trace must hold: one root, known parents, each child inside its parent, in seq and time. */
function expectConsistent(spans: WireSpan[], finished: boolean): void {
  const byId = new Map(spans.map((span) => [span.id, span]));
  expect(byId.size, 'span ids are unique').toBe(spans.length);
  const roots = spans.filter((span) => span.parentId === null);
  expect(roots.map((span) => span.kind)).toEqual(['workflow']);
  for (const span of spans) {
    const start = Date.parse(span.startedAt);
    if (span.endedAt === null) {
      expect(span.status).toBe('open');
      expect(span.durationMs).toBeNull();
    } else {
      expect(span.status).not.toBe('open');
      expect(Date.parse(span.endedAt)).toBeGreaterThanOrEqual(start);
      expect(span.durationMs).toBe(Date.parse(span.endedAt) - start);
      expect(span.endSeq as number).toBeGreaterThan(span.startSeq ?? 0);
    }
    if (finished) expect(span.status, `${span.kind} ${span.name}`).not.toBe('open');
    if (span.parentId === null) continue;
    const parent = byId.get(span.parentId);
    expect(parent, `the parent of ${span.kind} ${span.name}`).toBeDefined();
    if (!parent) continue;
    expect(span.startSeq as number).toBeGreaterThan(parent.startSeq ?? 0);
    expect(start).toBeGreaterThanOrEqual(Date.parse(parent.startedAt));
    if (parent.endedAt !== null) {
      expect(span.endedAt, `${span.kind} ${span.name} ends within its parent`).not.toBeNull();
      expect(Date.parse(span.endedAt as string)).toBeLessThanOrEqual(Date.parse(parent.endedAt));
      expect(span.endSeq as number).toBeLessThanOrEqual(parent.endSeq as number);
    }
  }
}

const summary = (spans: WireSpan[]) =>
  spans.map((span) => {
    const parent = spans.find((candidate) => candidate.id === span.parentId);
    return `${span.kind}:${span.name}:${span.status}${parent ? ` <${parent.kind}:${parent.name}` : ''}`;
  });

describe('GET /v1/workflows/:id/trace', () => {
  it('a simple workflow with a tool call: the workflow, its two model calls and the tool call, all ended', async () => {
    h.provider.enqueue(
      callsTo({ id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } }),
      answer('It is 2.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'What is 1 + 1?',
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const spans = await spansOf(id);
    expectConsistent(spans, true);
    expect(summary(spans)).toEqual([
      'workflow:workflow:completed',
      'llm_call:turn-1:completed <workflow:workflow',
      'tool_call:calculator:completed <workflow:workflow',
      'llm_call:turn-2:completed <workflow:workflow',
    ]);
    expect(spans[0]?.attributes).toMatchObject({ mode: 'simple', reason: 'answered' });
    expect(spans[1]?.attributes).toMatchObject({ model: 'gpt', finishReason: 'tool_calls' });
    expect(spans[2]?.attributes).toMatchObject({ tool: 'calculator', callId: 'call_sum' });
  });

  it('a pipeline through a checkpoint, a retry and a continue: each attempt, call and wait, nested in order', async () => {
    const { id, version } = await pausedAtCheckpoint('Compare a, b and c for the trace');
    const paused = await spansOf(id);
    expectConsistent(paused, false);
    // Paused: the workflow and its wait are open, nothing else.
    expect(paused.filter((span) => span.status === 'open').map((span) => span.kind)).toEqual([
      'workflow',
      'wait',
    ]);

    h.provider.enqueue(answer('Result of b, again.'));
    expect((await act(id, 'retry', { version })).statusCode).toBe(202);
    const again = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
    expect(again.status).toBe('awaiting_input');
    h.provider.enqueue(answer('Result of c.'), answer('The final answer.'));
    expect((await act(id, 'continue', { version: again.version })).statusCode).toBe(202);
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);

    const spans = await spansOf(id);
    expectConsistent(spans, true);
    expect(summary(spans)).toEqual([
      'workflow:workflow:completed',
      'llm_call:plan:completed <workflow:workflow',
      'stage:a:completed <workflow:workflow',
      'llm_call:a/turn-1:completed <stage:a',
      'stage:b:completed <workflow:workflow',
      'llm_call:b/turn-1:completed <stage:b',
      'wait:checkpoint:completed <workflow:workflow',
      'stage:b:completed <workflow:workflow',
      'llm_call:b/turn-1:completed <stage:b',
      'wait:checkpoint:completed <workflow:workflow',
      'stage:c:completed <workflow:workflow',
      'llm_call:c/turn-1:completed <stage:c',
      'llm_call:synthesis:completed <workflow:workflow',
    ]);
    const stages = spans.filter((span) => span.kind === 'stage');
    expect(
      stages.map((span) => [span.name, span.attributes.attempt, span.attributes.reason]),
    ).toEqual([
      ['a', 1, 'first'],
      ['b', 1, 'first'],
      ['b', 2, 'user_retry'],
      ['c', 1, 'first'],
    ]);
    // Each call of a stage lies within its own attempt, not the other one of the same stage.
    const retried = stages[2] as WireSpan;
    expect(spans.find((span) => span.parentId === retried.id)?.startSeq).toBeGreaterThan(
      retried.startSeq as number,
    );
    const waits = spans.filter((span) => span.kind === 'wait');
    expect(waits.map((span) => span.attributes.action)).toEqual(['retry', 'continue']);
    expect(waits[0]?.attributes).not.toHaveProperty('result');
    // Stages, waits and calls outside stages follow one another: they never overlap.
    const topLevel = spans.filter((span) => span.parentId === 0);
    for (let index = 1; index < topLevel.length; index++) {
      expect((topLevel[index] as WireSpan).startSeq).toBeGreaterThan(
        (topLevel[index - 1] as WireSpan).endSeq as number,
      );
    }
  });

  it('a running workflow: the call in flight and its stage attempt are open, ended ones are not', async () => {
    const id = await stalledAt(
      'Compare x and y while stalled',
      [planReply(stage('x'), stage('y')), answer('Result of x.')],
      'y/turn-1',
    );
    try {
      const spans = await spansOf(id);
      expectConsistent(spans, false);
      expect(summary(spans)).toEqual([
        'workflow:workflow:open',
        'llm_call:plan:completed <workflow:workflow',
        'stage:x:completed <workflow:workflow',
        'llm_call:x/turn-1:completed <stage:x',
        'stage:y:open <workflow:workflow',
        'llm_call:y/turn-1:open <stage:y',
      ]);
    } finally {
      expect((await act(id, 'cancel')).statusCode).toBe(202);
    }
    await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    const spans = await spansOf(id);
    expectConsistent(spans, true);
    expect(spans.slice(-2).map((span) => `${span.kind}:${span.status}`)).toEqual([
      'stage:failed',
      'llm_call:failed',
    ]);
    expect(spans[0]?.status).toBe('cancelled');
  });

  it('another tenant’s workflow and an unknown id answer 404', async () => {
    h.provider.enqueue(answer('Hello.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Hello', mode: 'simple' });
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const other = await createTenant(h.testApp, h.operatorKey, { name: 'trace-other' });
    const foreign = await traceOf(id, other.key);
    expect(foreign.status).toBe(404);
    expect(foreign.body.code).toBe('not_found');
    const unknown = await traceOf(randomUUID());
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('not_found');
    expect((await traceOf(id.toUpperCase())).status).toBe(200);
  });
});
