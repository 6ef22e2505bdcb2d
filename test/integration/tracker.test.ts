import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TurnState } from '../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../src/orchestrator/tool-loop/turns-repository.js';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { createTenancyService } from '../../src/tenancy/service.js';
import { createEventHub, type EventHub } from '../../src/tracker/event-hub.js';
import { createWorkflowTracker } from '../../src/tracker/tracker.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

const log = pino({ level: 'silent' });
let database: TestDatabase;
let handle: DatabaseHandle;
let hub: EventHub;
let tenantId: string;

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 10, log });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
  hub = createEventHub({ db: handle.db, listenUrl: database.url, origin: 'replica-a', log });
  await hub.start();
});
afterAll(async () => {
  await hub?.close();
  await handle?.close();
  await database?.drop();
});

async function newWorkflow(): Promise<string> {
  const id = randomUUID();
  await handle.db
    .insertInto('workflows')
    .values({
      id,
      tenant_id: tenantId,
      status: 'queued',
      mode: 'auto',
      model: 'scripted',
      input: 'hi',
      tools: [],
      metadata: '{}',
    })
    .execute();
  return id;
}

function trackerFor(workflowId: string, origin = 'replica-a', eventHub: EventHub = hub) {
  return createWorkflowTracker({
    db: handle.db,
    hub: eventHub,
    tenantId,
    workflowId,
    origin,
    log,
    tokenFlushMs: 20,
  });
}

async function storedSeqs(workflowId: string): Promise<number[]> {
  const rows = await workflowEventsRepository(handle.db).listAfter({
    workflowId,
    afterSeq: 0,
    limit: 10_000,
  });
  return rows.map((row) => row.seq);
}

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
    const row = await handle.db
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

  it('tokens are coalesced for live subscribers, not stored, and arrive before the event that follows them', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const seen: string[] = [];
    const unsubscribe = hub.subscribe(workflowId, {
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
      db: handle.db,
      listenUrl: database.url,
      origin: 'replica-b',
      log,
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

  it('the listening connection killed mid-stream: the hub reconnects and its subscribers lose nothing', async () => {
    const other = createEventHub({
      db: handle.db,
      listenUrl: database.url,
      origin: 'replica-c',
      log,
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
      await handle.pool.query('SELECT pg_terminate_backend($1)', [pid]);
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
  describe('its write queue', () => {
    /** Statements the pool ran while `work` ran (kysely checks out one connection per statement). */
    async function statementsDuring(work: () => Promise<void>): Promise<number> {
      let count = 0;
      const onAcquire = () => {
        count += 1;
      };
      handle.pool.on('acquire', onAcquire);
      try {
        await work();
      } finally {
        handle.pool.off('acquire', onAcquire);
      }
      return count;
    }

    const turn = (number: number): TurnState => ({
      schemaVersion: 1,
      turn: number,
      model: 'scripted',
      assistant: { content: `turn ${number}`, toolCalls: [] },
      toolResults: [],
      awaiting: null,
      finishReason: 'stop',
    });

    async function storedTurns(workflowId: string): Promise<number[]> {
      const rows = await handle.db
        .selectFrom('workflow_turns')
        .select('turn')
        .where('workflow_id', '=', workflowId)
        .orderBy('turn')
        .execute();
      return rows.map((row) => row.turn);
    }

    it('events and a turn reported back to back are written in one statement, in the order reported', async () => {
      const workflowId = await newWorkflow();
      const tracker = trackerFor(workflowId);
      await tracker.begin();
      const statements = await statementsDuring(async () => {
        tracker.enqueue('llm_call', 'turn-1', 'completed');
        tracker.enqueue('tool_call', 'turn-1', 'started', { callId: 'a' });
        tracker.enqueue('tool_call', 'turn-1', 'completed', { callId: 'a' });
        await tracker.persist(turnWrite(turn(1)));
      });
      expect(statements).toBe(1);
      const stored = await workflowEventsRepository(handle.db).listAfter({
        workflowId,
        afterSeq: 1,
        limit: 10,
      });
      expect(stored.map((row) => [row.seq, row.type, row.status])).toEqual([
        [2, 'llm_call', 'completed'],
        [3, 'tool_call', 'started'],
        [4, 'tool_call', 'completed'],
      ]);
      expect(await storedTurns(workflowId)).toEqual([1]);
    });

    /** A begun workflow whose events and tokens `watcher`'s subscriber notes in `seen` as `seq:type` and `tokens:text`. */
    async function begunAndWatched(watcher: EventHub = hub) {
      const workflowId = await newWorkflow();
      const tracker = trackerFor(workflowId);
      await tracker.begin();
      const seen: string[] = [];
      const unsubscribe = watcher.subscribe(workflowId, {
        onEvent: (event) => seen.push(`${event.seq}:${event.type}`),
        onTokens: (text) => seen.push(`tokens:${text}`),
      });
      return { workflowId, tracker, seen, unsubscribe };
    }

    it('a transition takes what was queued before it into its own statement, ahead of its events', async () => {
      const { workflowId, tracker, seen, unsubscribe } = await begunAndWatched();
      let ended: Awaited<ReturnType<typeof tracker.end>> | undefined;
      const statements = await statementsDuring(async () => {
        tracker.enqueue('llm_call', 'turn-1', 'completed');
        tracker.enqueueWrite(turnWrite(turn(1)));
        ended = await tracker.end({ status: 'completed', answer: 'done' });
      });
      unsubscribe();
      expect(statements).toBe(1);
      expect(ended?.events.map((event) => event.type)).toEqual(['workflow_end']);
      expect(seen).toEqual(['2:llm_call', '3:workflow_end']);
      expect(await storedTurns(workflowId)).toEqual([1]);
    });

    it('tokens streamed between queued events reach subscribers between them', async () => {
      const { tracker, seen, unsubscribe } = await begunAndWatched();
      tracker.enqueue('llm_call', 'turn-1', 'started');
      tracker.token('Hel');
      tracker.token('lo');
      tracker.enqueue('llm_call', 'turn-1', 'completed');
      await tracker.end({ status: 'completed', answer: 'Hello' });
      unsubscribe();
      expect(seen).toEqual(['2:llm_call', 'tokens:Hello', '3:llm_call', '4:workflow_end']);
    });

    /** A second replica's hub, on a pool of its own (its store reads are not the tracker's statements). */
    async function withSecondReplica(body: (other: EventHub) => Promise<void>): Promise<void> {
      const otherHandle = openDatabase({ url: database.url, poolMax: 2, log });
      const other = createEventHub({
        db: otherHandle.db,
        listenUrl: database.url,
        origin: 'replica-b',
        log,
      });
      await other.start();
      try {
        await body(other);
      } finally {
        await other.close();
        await otherHandle.close();
      }
    }

    it("on another replica, token text carried in a statement's NOTIFY arrives at its place among the events", async () => {
      await withSecondReplica(async (other) => {
        const { tracker, seen } = await begunAndWatched(other);
        const statements = await statementsDuring(async () => {
          tracker.enqueue('llm_call', 'turn-1', 'started');
          tracker.token('Hello ');
          tracker.token('there');
          tracker.enqueue('llm_call', 'turn-1', 'completed');
          await tracker.end({ status: 'completed', answer: 'Hello there' });
        });
        // One statement: the events, the text and the end, with one NOTIFY.
        expect(statements).toBe(1);
        await expect
          .poll(() => seen)
          .toEqual([
            '1:workflow_start',
            '2:llm_call',
            'tokens:Hello there',
            '3:llm_call',
            '4:workflow_end',
          ]);
      });
    });

    it('token text too long for a NOTIFY is published by itself, still in its place', async () => {
      await withSecondReplica(async (other) => {
        const workflowId = await newWorkflow();
        const seen: string[] = [];
        other.subscribe(workflowId, {
          onEvent: (event) => seen.push(`event:${event.type}`),
          onTokens: (text) => {
            // Long text is published in pieces; what matters is where it arrives.
            const last = seen.at(-1);
            if (last?.startsWith('tokens:')) {
              seen[seen.length - 1] = `tokens:${Number(last.slice(7)) + text.length}`;
            } else {
              seen.push(`tokens:${text.length}`);
            }
          },
        });
        const tracker = trackerFor(workflowId);
        await tracker.begin();
        tracker.enqueue('llm_call', 'turn-1', 'started');
        tracker.token('x'.repeat(6_500));
        tracker.enqueue('llm_call', 'turn-1', 'completed');
        await tracker.end({ status: 'completed', answer: 'x' });
        await expect
          .poll(() => seen)
          .toEqual([
            'event:workflow_start',
            'event:llm_call',
            'tokens:6500',
            'event:llm_call',
            'event:workflow_end',
          ]);
      });
    });

    it('progress nobody waits for is written within its flush delay, without a statement to go with', async () => {
      const workflowId = await newWorkflow();
      const tracker = trackerFor(workflowId);
      await tracker.begin();
      tracker.enqueue('tool_call', 'turn-1', 'started', { callId: 'slow' });
      await expect.poll(() => storedSeqs(workflowId), { timeout: 2000 }).toEqual([1, 2]);
    });

    it('a queued event that cannot be written fails the next call that waits, once', async () => {
      const workflowId = await newWorkflow();
      const tracker = trackerFor(workflowId);
      await tracker.begin();
      // PostgreSQL's jsonb refuses the NUL character: this batch fails on its own.
      tracker.enqueue('warning', null, 'info', { text: 'nul \u0000 here' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      await expect(tracker.emit('warning', null, 'info', { text: 'fine' })).rejects.toThrow();
      const next = await tracker.emit('warning', null, 'info', { text: 'fine again' });
      expect(next.seq).toBe(2);
      expect(await storedSeqs(workflowId)).toEqual([1, 2]);
    });
  });
});
