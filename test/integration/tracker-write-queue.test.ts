import { describe, expect, it } from 'vitest';
import type { TurnState } from '../../src/orchestrator/tool-loop/state.js';
import { turnWrite } from '../../src/orchestrator/tool-loop/turns-repository.js';
import { openDatabase } from '../../src/store/database.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { createEventHub, type EventHub } from '../../src/tracker/event-hub.js';
import { silentLog, useTrackerDatabase } from '../support/tracker-database.js';

const setup = useTrackerDatabase();
const { newWorkflow, trackerFor, storedSeqs } = setup;

describe("The WorkflowTracker's write queue", () => {
  /** Statements the pool ran while `work` ran (kysely checks out one connection per statement). */
  async function statementsDuring(work: () => Promise<void>): Promise<number> {
    let count = 0;
    const onAcquire = () => {
      count += 1;
    };
    setup.handle.pool.on('acquire', onAcquire);
    try {
      await work();
    } finally {
      setup.handle.pool.off('acquire', onAcquire);
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

  /** The stored events after `afterSeq`, as [seq, type, status]. */
  async function storedEvents(workflowId: string, afterSeq: number) {
    const rows = await workflowEventsRepository(setup.handle.db).listAfter({
      workflowId,
      afterSeq,
      limit: 10,
    });
    return rows.map((row) => [row.seq, row.type, row.status]);
  }

  async function storedTurns(workflowId: string): Promise<number[]> {
    const rows = await setup.handle.db
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
    expect(await storedEvents(workflowId, 1)).toEqual([
      [2, 'llm_call', 'completed'],
      [3, 'tool_call', 'started'],
      [4, 'tool_call', 'completed'],
    ]);
    expect(await storedTurns(workflowId)).toEqual([1]);
  });

  /** A begun workflow whose events and tokens `watcher`'s subscriber notes in `seen` as `seq:type` and `tokens:text`. */
  async function begunAndWatched(watcher: EventHub = setup.hub) {
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
    const otherHandle = openDatabase({ url: setup.database.url, poolMax: 2, log: silentLog });
    const other = createEventHub({
      db: otherHandle.db,
      listenUrl: setup.database.url,
      origin: 'replica-b',
      log: silentLog,
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

  it("a deferred start goes in the statement of the first turn, ahead of the turn's events", async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    let started: Awaited<ReturnType<typeof tracker.begin>> | undefined;
    const statements = await statementsDuring(async () => {
      const begun = tracker.begin({}, undefined, { deferred: true }).then((result) => {
        started = result;
      });
      tracker.enqueue('llm_call', 'turn-1', 'started');
      tracker.enqueue('llm_call', 'turn-1', 'completed');
      await tracker.persist(turnWrite(turn(1)));
      await begun;
    });
    expect(statements).toBe(1);
    expect(started?.workflow.status).toBe('running');
    expect(started?.events.map((event) => [event.seq, event.type])).toEqual([
      [1, 'workflow_start'],
    ]);
    expect(await storedEvents(workflowId, 0)).toEqual([
      [1, 'workflow_start', 'started'],
      [2, 'llm_call', 'started'],
      [3, 'llm_call', 'completed'],
    ]);
    expect(await storedTurns(workflowId)).toEqual([1]);
  });

  it('a deferred start with nothing after it is written within the progress delay', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    const started = await tracker.begin({}, undefined, { deferred: true });
    expect(started.workflow.status).toBe('running');
    expect(await storedSeqs(workflowId)).toEqual([1]);
  });

  it('a deferred start the database refuses fails what it took along', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    // Cancelled before its run started: the start is no longer a valid transition.
    await trackerFor(workflowId).end({ status: 'cancelled' });
    const begun = tracker.begin({}, undefined, { deferred: true });
    tracker.enqueue('llm_call', 'turn-1', 'started');
    const persisted = tracker.persist(turnWrite(turn(1)));
    await expect(begun).rejects.toMatchObject({ status: 409 });
    await expect(persisted).rejects.toMatchObject({ status: 409 });
    expect(await storedTurns(workflowId)).toEqual([]);
  });

  it('a queued event that cannot be written stops the writer: every later write fails until the run drains', async () => {
    const workflowId = await newWorkflow();
    const tracker = trackerFor(workflowId);
    await tracker.begin();
    // PostgreSQL's jsonb refuses the NUL character: this batch fails on its own.
    tracker.enqueue('warning', null, 'info', { text: 'nul \u0000 here' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await expect(tracker.emit('warning', null, 'info', { text: 'fine' })).rejects.toThrow();
    // Written after the lost event as if it had committed: refused too.
    tracker.enqueue('warning', null, 'info', { text: 'queued after' });
    await expect(tracker.emit('warning', null, 'info', { text: 'fine again' })).rejects.toThrow();
    expect(await storedSeqs(workflowId)).toEqual([1]);
    // Settling, the run drains its queue; then it may write how it ends.
    await tracker.drain();
    const next = await tracker.emit('warning', null, 'info', { text: 'the end' });
    expect(next.seq).toBe(2);
    expect(await storedSeqs(workflowId)).toEqual([1, 2]);
  });
});
