import { describe, expect, it } from 'vitest';
import { loadPipelineRows } from '../../src/store/pipeline-rows.js';
import { endedAttemptError } from '../../src/store/pipeline-transition-writes.js';
import { pipelinesRepository } from '../../src/store/pipelines.js';
import type { NewEventRow } from '../../src/store/workflow-events.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { CANCELLED_WORK, endingsOfOpenWork } from '../../src/workflows/open-work.js';
import { isBatchable } from '../../src/workflows/transition-batches.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import { lockWaiter } from '../support/database.js';
import { useEventNotifications, useTrackerDatabase } from '../support/tracker-database.js';
import { event, start } from '../support/transition-batches.js';

/**
 * Transitions with events read under the workflow row's lock
 * (TransitionInput's `eventsUnderLock`), as a cancel ends the calls its
 * workflow's run left open, against a real PostgreSQL.
 */

const setup = useTrackerDatabase();
const notifications = useEventNotifications(setup);

function started(type: 'llm_call' | 'tool_call', detail: Record<string, unknown>): NewEventRow {
  return { type, step: 'turn-1', status: 'started', detail, elapsedMs: null };
}

function stageStarted(attempt: number): NewEventRow {
  return {
    type: 'stage',
    step: 'stage-1',
    status: 'started',
    detail: { stage: 'stage-1', title: 'Gather', attempt, reason: 'first' },
    elapsedMs: null,
  };
}

/** The lease a run's start takes, under which it writes its stage attempts. */
const RUN_LEASE = { owner: 'replica-a:run', leaseMs: 60_000 };

function cancel(workflowId: string) {
  const key = { tenantId: setup.tenantId, workflowId };
  return transitionWorkflow(setup.handle.db, {
    ...key,
    to: 'cancelled',
    events: [{ ...event('workflow_end'), status: 'cancelled' }],
    eventsUnderLock: (tx) => endingsOfOpenWork(tx, key, CANCELLED_WORK),
    origin: 'replica-b',
  });
}

async function append(workflowId: string, events: NewEventRow[]): Promise<void> {
  await workflowEventsRepository(setup.handle.db).appendNotified({
    workflowId,
    tenantId: setup.tenantId,
    events,
    origin: 'replica-a',
  });
}

describe('events under the row lock', () => {
  it('go before the transition’s own, and token text keeps its place after the same event', async () => {
    const id = await setup.newWorkflow();
    const input = start(setup, id, {
      eventsUnderLock: async () => [event('warning')],
      tokens: { text: 'Hello', afterEvents: 1 },
    });
    expect(isBatchable(input)).toBe(false);
    const before = notifications.received.length;
    const result = await transitionWorkflow(setup.handle.db, input);
    expect(result.events.map((stored) => [stored.seq, stored.type])).toEqual([
      [1, 'warning'],
      [2, 'workflow_start'],
      [3, 'classification'],
    ]);
    await notifications.waitFor(before + 1);
    // After workflow_start (seq 2), as it was after the first of the transition's own events.
    expect(notifications.received.slice(before)).toContainEqual({
      kind: 'events',
      workflowId: id,
      lastSeq: 3,
      origin: 'replica-a',
      tokens: { text: 'Hello', afterSeq: 2 },
    });
  });

  it('a cancel ends each call left open, model and tool, before workflow_end; ended ones are left alone', async () => {
    const id = await setup.newWorkflow();
    await transitionWorkflow(setup.handle.db, start(setup, id));
    await append(id, [
      started('llm_call', { model: 'bench' }),
      started('tool_call', { tool: 'calculator', callId: 'call_1' }),
      started('tool_call', { tool: 'http_fetch', callId: 'call_2' }),
      { ...started('tool_call', { tool: 'calculator', callId: 'call_1' }), status: 'completed' },
    ]);
    const { events } = await cancel(id);
    expect(events.map((stored) => [stored.type, stored.status, stored.step])).toEqual([
      ['llm_call', 'failed', 'turn-1'],
      ['tool_call', 'failed', 'turn-1'],
      ['workflow_end', 'cancelled', null],
    ]);
    expect(events[0]?.detail).toEqual({
      model: 'bench',
      error: { code: 'cancelled', message: CANCELLED_WORK.calls.message },
    });
    expect(events[1]?.detail).toEqual({ tool: 'http_fetch', callId: 'call_2', error: 'cancelled' });
  });

  it('a cancel ends the stage attempt running, after its calls, as the attempt’s row is failed', async () => {
    const id = await setup.newWorkflow();
    await transitionWorkflow(setup.handle.db, start(setup, id, { lease: RUN_LEASE }));
    const attempt = { tenantId: setup.tenantId, workflowId: id, stageId: 'stage-1', attempt: 1 };
    await pipelinesRepository(setup.handle.db).startAttempt({
      ...attempt,
      heldBy: RUN_LEASE.owner,
      planRevision: 1,
      reason: 'first',
      feedback: null,
    });
    await append(id, [
      stageStarted(1),
      { ...started('llm_call', { model: 'bench' }), step: 'stage-1/turn-1' },
    ]);
    const { events } = await cancel(id);
    expect(events.map((stored) => [stored.type, stored.status, stored.step])).toEqual([
      ['llm_call', 'failed', 'stage-1/turn-1'],
      ['stage', 'failed', 'stage-1'],
      ['workflow_end', 'cancelled', null],
    ]);
    expect(events[1]?.detail).toEqual({
      stage: 'stage-1',
      title: 'Gather',
      attempt: 1,
      error: endedAttemptError('cancelled'),
    });
    const { attempts } = await loadPipelineRows(setup.handle.db, attempt);
    expect(attempts[0]).toMatchObject({ status: 'failed', error: endedAttemptError('cancelled') });
  });

  it('an attempt its run ended before writing the end’s event gets the event its row says', async () => {
    const id = await setup.newWorkflow();
    await transitionWorkflow(setup.handle.db, start(setup, id, { lease: RUN_LEASE }));
    const pipelines = pipelinesRepository(setup.handle.db);
    const key = {
      tenantId: setup.tenantId,
      workflowId: id,
      heldBy: RUN_LEASE.owner,
      stageId: 'stage-1',
    };
    const begin = (attempt: number) =>
      pipelines.startAttempt({ ...key, attempt, planRevision: 1, reason: 'first', feedback: null });
    await begin(1);
    await begin(2);
    await append(id, [stageStarted(1), stageStarted(2)]);
    // The run ended both (rows written), and was cancelled before their events were.
    const validation = { passed: false, findings: ['The result is empty.'] };
    await pipelines.failAttempt({ ...key, attempt: 1, result: '', validation });
    const completed = await pipelines.completeAttempt({
      ...key,
      attempt: 2,
      result: 'Found it.',
      validation: { passed: true, findings: [] },
    });
    const { events } = await cancel(id);
    expect(events.map((stored) => [stored.type, stored.status, stored.detail.attempt])).toEqual([
      ['stage', 'failed', 1],
      ['stage', 'completed', 2],
      ['workflow_end', 'cancelled', undefined],
    ]);
    expect(events[0]?.detail).toEqual({
      stage: 'stage-1',
      title: 'Gather',
      attempt: 1,
      validation,
    });
    expect(events[1]?.detail).toEqual({
      stage: 'stage-1',
      title: 'Gather',
      attempt: 2,
      validation: { passed: true, findings: [] },
    });
    expect(events[1]?.elapsedMs).toBe(completed?.elapsedMs);
    const { attempts } = await loadPipelineRows(setup.handle.db, key);
    expect(attempts.map((row) => row.status)).toEqual(['failed', 'completed']);
  });

  it('a call ended by a write that held the row lock when the cancel came is not ended again', async () => {
    const id = await setup.newWorkflow();
    await transitionWorkflow(setup.handle.db, start(setup, id));
    await append(id, [started('tool_call', { tool: 'calculator', callId: 'call_1' })]);
    // The run's write of the call's end holds the row lock while the cancel comes.
    let cancelled: ReturnType<typeof cancel> | undefined;
    await setup.handle.db.transaction().execute(async (tx) => {
      await workflowEventsRepository(tx).appendNotified({
        workflowId: id,
        tenantId: setup.tenantId,
        events: [
          {
            ...started('tool_call', { tool: 'calculator', callId: 'call_1' }),
            status: 'completed',
          },
        ],
        origin: 'replica-a',
      });
      cancelled = cancel(id);
      await lockWaiter(setup.handle.pool);
    });
    const { events } = await (cancelled as ReturnType<typeof cancel>);
    expect(events.map((stored) => stored.type)).toEqual(['workflow_end']);
    const stored = await workflowEventsRepository(setup.handle.db).listAfter({
      workflowId: id,
      afterSeq: 0,
      limit: 100,
    });
    expect(stored.map((row) => [row.type, row.status])).toEqual([
      ['workflow_start', 'completed'],
      ['classification', 'completed'],
      ['tool_call', 'started'],
      ['tool_call', 'completed'],
      ['workflow_end', 'cancelled'],
    ]);
  });
});
