import { describe, expect, it } from 'vitest';
import { buildTrace } from '../../src/workflows/trace.js';
import type { EventStatus, EventType, WorkflowEvent } from '../../src/workflows/types.js';

/** buildTrace on event logs the HTTP tests cannot easily produce. */

const workflow = { id: 'w', createdAt: new Date('2026-01-01T00:00:00.000Z') };
let seq = 0;

function event(
  type: EventType,
  status: EventStatus,
  fields: {
    step?: string | null;
    detail?: Record<string, unknown>;
    at: number;
    elapsedMs?: number;
  },
): WorkflowEvent {
  seq += 1;
  return {
    seq,
    workflowId: 'w',
    type,
    step: fields.step ?? null,
    status,
    detail: fields.detail ?? {},
    ts: new Date(workflow.createdAt.getTime() + fields.at).toISOString(),
    ...(fields.elapsedMs === undefined ? {} : { elapsedMs: fields.elapsedMs }),
  };
}

describe('buildTrace', () => {
  it('a call whose start and end were written together starts its measured time before its end, within its stage', () => {
    seq = 0;
    const trace = buildTrace(workflow, [
      event('workflow_start', 'started', { at: 10 }),
      event('stage', 'started', { step: 'a', detail: { stage: 'a', attempt: 1 }, at: 20 }),
      event('llm_call', 'started', { step: 'a/turn-1', at: 500 }),
      event('llm_call', 'completed', { step: 'a/turn-1', at: 500, elapsedMs: 300 }),
      // Measured longer than the stage has run: it starts with the stage, not before.
      event('tool_call', 'started', { step: 'a/turn-1', detail: { callId: 'c1' }, at: 900 }),
      event('tool_call', 'completed', {
        step: 'a/turn-1',
        detail: { callId: 'c1' },
        at: 900,
        elapsedMs: 5000,
      }),
      event('stage', 'completed', {
        step: 'a',
        detail: { stage: 'a', attempt: 1 },
        at: 950,
        elapsedMs: 930,
      }),
      event('workflow_end', 'completed', { at: 960 }),
    ]);
    const [root, stage, call, tool] = trace.spans;
    expect(call).toMatchObject({ parentId: stage?.id, durationMs: 300 });
    expect(call?.startedAt.getTime()).toBe(workflow.createdAt.getTime() + 200);
    expect(tool?.startedAt.getTime()).toBe(stage?.startedAt.getTime());
    expect(stage?.startedAt.getTime()).toBe(workflow.createdAt.getTime() + 20);
    expect(root).toMatchObject({ status: 'completed', durationMs: 960 });
  });

  it('an event written with an earlier clock than the one before it never makes a span end before it starts', () => {
    seq = 0;
    const trace = buildTrace(workflow, [
      event('workflow_start', 'started', { at: 100 }),
      event('tool_call', 'started', { step: 'turn-1', detail: { callId: 'c1' }, at: 400 }),
      // Another replica, or a write that waited for a lock: its clock reads earlier.
      event('tool_call', 'failed', { step: 'turn-1', detail: { callId: 'c1' }, at: 300 }),
      event('workflow_end', 'failed', { at: 250 }),
    ]);
    for (const span of trace.spans) {
      expect(span.endedAt?.getTime()).toBeGreaterThanOrEqual(span.startedAt.getTime());
      expect(span.durationMs).toBeGreaterThanOrEqual(0);
    }
    expect(trace.spans.map((span) => span.status)).toEqual(['failed', 'failed']);
  });

  it('a finished workflow leaves nothing open: a start its log never ended ends with it, and so does a wait', () => {
    seq = 0;
    const trace = buildTrace(workflow, [
      event('workflow_start', 'started', { at: 1 }),
      event('stage', 'started', { step: 'a', detail: { stage: 'a', attempt: 1 }, at: 2 }),
      event('stage', 'failed', { step: 'a', detail: { stage: 'a', attempt: 1 }, at: 3 }),
      event('stage', 'paused', { step: 'a', detail: { stage: 'a', attempt: 1 }, at: 4 }),
      event('llm_call', 'started', { step: 'synthesis', at: 5 }),
      event('workflow_end', 'cancelled', { at: 6 }),
    ]);
    expect(
      trace.spans.map((span) => `${span.kind}:${span.name}:${span.status}:${span.endSeq}`),
    ).toEqual([
      'workflow:workflow:cancelled:6',
      'stage:a:failed:3',
      'wait:stage_failed:cancelled:6',
      'llm_call:synthesis:failed:6',
    ]);
    expect(trace.lastSeq).toBe(6);
  });

  it('a queued workflow, no event yet: only its open root, from its creation', () => {
    const trace = buildTrace(workflow, []);
    expect(trace).toEqual({
      workflowId: 'w',
      lastSeq: 0,
      spans: [
        expect.objectContaining({
          id: 0,
          kind: 'workflow',
          status: 'open',
          startedAt: workflow.createdAt,
          endedAt: null,
        }),
      ],
    });
  });
});
