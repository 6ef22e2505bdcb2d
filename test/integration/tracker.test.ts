import { describe, expect, it } from 'vitest';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { createEventHub } from '../../src/tracker/event-hub.js';
import { createWorkflowTracker } from '../../src/tracker/tracker.js';
import { toEvent } from '../../src/workflows/rows.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { silentLog, useTrackerDatabase } from '../support/tracker-database.js';

const setup = useTrackerDatabase();
const { newWorkflow, trackerFor, storedSeqs } = setup;

describe('WorkflowTracker', () => {
  it('concurrent emitters on one workflow get gap-free seqs from 1, never twice', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const emitted = await Promise.all(
      Array.from({ length: 60 }, (_, index) =>
        tracker.emit('warning', `emitter-${index % 6}`, 'info', { index }),
      ),
    );
    expect(emitted.map((event) => event.seq).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 60 }, (_, i) => i + 1),
    );
    expect(await storedSeqs(workflowId)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    const row = await setup.handle.db
      .selectFrom('workflows')
      .select('last_seq')
      .where('id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(row.last_seq).toBe(60);
  });

  it('begin and end are transitions: version bumps, status changes and their events commit together', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const begun = await tracker.begin({ mode: 'auto' });
    expect(begun.workflow).toMatchObject({ status: 'running', version: 2 });
    expect(begun.events).toEqual([
      expect.objectContaining({ seq: 1, type: 'workflow_start', status: 'started' }),
    ]);
    const ended = await tracker.end({ status: 'completed', answer: 'done' });
    expect(ended.workflow).toMatchObject({
      status: 'completed',
      version: 3,
      result: { answer: 'done' },
    });
    expect(ended.workflow.finishedAt).toBeInstanceOf(Date);
    expect(ended.events).toEqual([
      expect.objectContaining({ seq: 2, type: 'workflow_end', status: 'completed' }),
    ]);
  });

  it('a run’s tracker (returning seq) gets its events back without the workflow, and the row changes all the same', async () => {
    const workflowId = await newWorkflow();
    const tracker = createWorkflowTracker({
      db: setup.handle.db,
      hub: setup.hub,
      tenantId: setup.tenantId,
      workflowId,
      origin: 'replica-a',
      log: silentLog,
      returning: 'seq',
    });
    const begun = await tracker.begin({ mode: 'auto' });
    expect(begun).not.toHaveProperty('workflow');
    expect(begun.events).toEqual([
      expect.objectContaining({ seq: 1, type: 'workflow_start', status: 'started' }),
    ]);
    await tracker.emit('warning', null, 'info', { code: 'between' });
    const ended = await tracker.end({ status: 'completed', answer: 'done' });
    expect(ended).not.toHaveProperty('workflow');
    expect(ended.events).toEqual([
      expect.objectContaining({ seq: 3, type: 'workflow_end', status: 'completed' }),
    ]);
    const row = await setup.handle.db
      .selectFrom('workflows')
      .select(['status', 'version', 'last_seq', 'result', 'finished_at'])
      .where('id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'completed', version: 3, last_seq: 3 });
    expect(row.result).toMatchObject({ answer: 'done' });
    expect(row.finished_at).toBeInstanceOf(Date);
    expect(await storedSeqs(workflowId)).toEqual([1, 2, 3]);
  });

  it('a transition the state machine forbids is a 409 and appends nothing', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    await tracker.end({ status: 'cancelled' });
    await expect(tracker.end({ status: 'completed', answer: 'late' })).rejects.toMatchObject({
      status: 409,
      code: 'workflow_finished',
    });
    expect(await storedSeqs(workflowId)).toEqual([1, 2]);
  });

  it('nothing is appended after workflow_end: a late emit is a 409', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    await tracker.end({ status: 'cancelled' });
    await expect(tracker.emit('answer', null, 'completed', { text: 'late' })).rejects.toMatchObject(
      {
        status: 409,
        code: 'workflow_finished',
      },
    );
    expect(await storedSeqs(workflowId)).toEqual([1, 2]);
  });

  it('two concurrent transitions from one version: one wins, the other gets 409', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    await tracker.transition({
      to: 'awaiting_input',
      awaitingReason: 'checkpoint',
      events: [
        { type: 'checkpoint', step: 'stage-1', status: 'paused', detail: {}, elapsedMs: null },
      ],
    });
    const resume = () =>
      tracker
        .transition({
          to: 'running',
          expectedVersion: 3,
          events: [
            { type: 'stage', step: 'stage-2', status: 'started', detail: {}, elapsedMs: null },
          ],
        })
        .then(
          () => 'ok',
          (error: { code?: string }) => error.code,
        );
    const outcomes = await Promise.all([resume(), resume()]);
    expect(outcomes.sort()).toEqual(['invalid_transition', 'ok']);
  });

  it('a stale version is a 409 stale_version', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    await expect(
      tracker.transition({
        to: 'awaiting_input',
        awaitingReason: 'clarification',
        expectedVersion: 1,
        events: [],
      }),
    ).rejects.toMatchObject({ status: 409, code: 'stale_version' });
  });

  it('an emit written with events enqueued before it resolves with its own event', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    tracker.enqueue('llm_call', 'turn-1', 'started', { model: 'scripted' });
    tracker.enqueue('llm_call', 'turn-1', 'completed', { model: 'scripted' });
    const emitted = await tracker.emit('warning', null, 'info', { message: 'mine' });
    expect(emitted).toMatchObject({ seq: 4, type: 'warning', detail: { message: 'mine' } });
    expect(await storedSeqs(workflowId)).toEqual([1, 2, 3, 4]);
  });

  it('the events subscribers and emitters are given are the stored rows, as a replay reads them', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const live: WorkflowEvent[] = [];
    const unsubscribe = setup.hub.subscribe(workflowId, {
      onEvent: (event) => live.push(event),
      onTokens: () => {},
    });
    const begun = await tracker.begin();
    // Values the store keeps differently from how they were given, and a detail changed after its emit.
    const detail: Record<string, unknown> = {
      at: new Date('2026-12-01T10:00:00.123Z'),
      missing: undefined,
      nested: { list: [1, 'two', null], ratio: 0.25 },
    };
    tracker.enqueue('tool_call', 'turn-1/call-1', 'started', detail, 12.6);
    const emitted = await tracker.emit('warning', null, 'info', { message: 'between' });
    detail.at = 'changed after its emit';
    tracker.enqueue('llm_call', 'turn-2', 'completed', { model: 'scripted' });
    const ended = await tracker.end({ status: 'completed', answer: 'done' });
    unsubscribe();

    const stored = (
      await workflowEventsRepository(setup.handle.db).listAfter({
        workflowId,
        afterSeq: 0,
        limit: 100,
      })
    ).map(toEvent);
    expect(stored.map((event) => event.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(stored[1]).toMatchObject({
      type: 'tool_call',
      detail: { at: '2026-12-01T10:00:00.123Z', nested: { list: [1, 'two', null], ratio: 0.25 } },
      elapsedMs: 13,
    });
    expect(stored[1]?.detail).not.toHaveProperty('missing');
    expect(live).toStrictEqual(stored);
    expect([...begun.events, emitted, ...ended.events]).toStrictEqual([
      stored[0],
      stored[2],
      stored[4],
    ]);
  });

  it('tokens are coalesced for live subscribers, not stored, and arrive before the event that follows them', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const seen: string[] = [];
    const unsubscribe = setup.hub.subscribe(workflowId, {
      onEvent: (event) => seen.push(`event:${event.type}`),
      onTokens: (text) => seen.push(`tokens:${text}`),
    });
    for (const token of ['Hel', 'lo ', 'wor', 'ld']) tracker.token(token);
    await tracker.emit('answer', null, 'completed', { text: 'Hello world' });
    unsubscribe();
    expect(seen).toEqual(['tokens:Hello world', 'event:answer']);
    expect(await storedSeqs(workflowId)).toEqual([1]);
  });

  it('a second replica receives events and tokens emitted on the first through LISTEN/NOTIFY', async () => {
    const other = createEventHub({
      db: setup.handle.db,
      listenUrl: setup.database.url,
      origin: 'replica-b',
      log: silentLog,
    });
    await other.start();
    try {
      const workflowId = await newWorkflow();
      const received: WorkflowEvent[] = [];
      const tokens: string[] = [];
      other.subscribe(workflowId, {
        onEvent: (event) => received.push(event),
        onTokens: (text) => tokens.push(text),
      });
      const tracker = trackerFor(workflowId);
      await tracker.begin();
      tracker.token('streamed ');
      tracker.token('text');
      await tracker.emit('answer', null, 'completed', { text: 'streamed text' });
      await tracker.end({ status: 'completed', answer: 'streamed text' });
      await expect.poll(() => received.map((event) => event.seq)).toEqual([1, 2, 3]);
      expect(tokens.join('')).toBe('streamed text');
    } finally {
      await other.close();
    }
  });

  it('the listening connection killed mid-stream: the setup.hub reconnects and its subscribers lose nothing', async () => {
    const other = createEventHub({
      db: setup.handle.db,
      listenUrl: setup.database.url,
      origin: 'replica-c',
      log: silentLog,
      healthCheckIntervalMs: 200,
    });
    await other.start();
    try {
      const workflowId = await newWorkflow();
      const received: number[] = [];
      other.subscribe(workflowId, {
        onEvent: (event) => received.push(event.seq),
        onTokens: () => undefined,
      });
      const tracker = trackerFor(workflowId);
      for (let i = 0; i < 5; i++) await tracker.emit('warning', null, 'info', { i });
      await expect.poll(() => received.length).toBe(5);
      const pid = other.listenerPid();
      expect(pid).toBeTypeOf('number');
      await setup.handle.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      for (let i = 5; i < 10; i++) await tracker.emit('warning', null, 'info', { i });
      await expect.poll(() => other.isListening(), { timeout: 10_000 }).toBe(true);
      await expect
        .poll(() => received, { timeout: 10_000 })
        .toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      expect(other.listenerPid()).not.toBe(pid);
    } finally {
      await other.close();
    }
  });
});
