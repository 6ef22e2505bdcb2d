import { describe, expect, it, vi } from 'vitest';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * A turn's write and the next turn's request overlap: the request goes out
 * while the write is in flight, and nothing of the new turn is stored
 * before the write commits. The write is held back by a row lock that a
 * second connection takes on the workflow while the turn's tool runs (the
 * tool server's `/slow/…` paths answer after 150 ms).
 */

const h = useToolLoopHarness();

async function countTurns(id: string): Promise<number> {
  const { rows } = await h.testApp.services.database.pool.query<{ count: string }>(
    'SELECT count(*) AS count FROM workflow_turns WHERE workflow_id = $1',
    [id],
  );
  return Number(rows[0]?.count);
}

/** Stored events of the second turn (its `llm_call`s, tokens never being stored) and after. */
async function eventsAfterTurnOne(id: string): Promise<string[]> {
  const events = await storedEvents(h.testApp, id);
  const after = events.findIndex((event) => event.step === 'turn-2');
  return after === -1 ? [] : events.slice(after).map((event) => event.type);
}

describe('a turn’s write and the next turn', () => {
  it('the next request goes out while the turn’s write waits; nothing of that turn is stored before the write commits', async () => {
    const { id, lock, requestsBefore } = await h.startWithHeldTurnWrite(
      '/slow/held',
      answer('Done.'),
    );
    try {
      // The second request arrives although the first turn is not written yet.
      await vi.waitFor(() => expect(h.provider.requests.length).toBe(requestsBefore + 2), {
        timeout: 5_000,
      });
      // Its answer is in and read, but nothing of that turn is stored before the write.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await countTurns(id)).toBe(0);
      expect(await eventsAfterTurnOne(id)).toEqual([]);
      await lock.query('COMMIT');
    } finally {
      lock.release();
    }
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Done.' } });
    const events = await storedEvents(h.testApp, id);
    expect(events.map((event) => [event.type, event.step, event.status])).toEqual([
      ['workflow_start', null, 'started'],
      ['classification', 'classify', 'completed'],
      ['llm_call', 'turn-1', 'started'],
      ['llm_call', 'turn-1', 'completed'],
      ['tool_call', 'turn-1', 'started'],
      ['tool_call', 'turn-1', 'completed'],
      ['llm_call', 'turn-2', 'started'],
      ['llm_call', 'turn-2', 'completed'],
      ['answer', null, 'completed'],
      ['usage', null, 'info'],
      ['workflow_end', null, 'completed'],
    ]);
    expect(await countTurns(id)).toBe(2);
  });

  it('the next turn’s reply is read while the write waits, but its tool calls run only once the write has committed', async () => {
    const second = await h.registerTool('/slow/second');
    const { id, lock, requestsBefore } = await h.startWithHeldTurnWrite(
      '/slow/held',
      callsTo({ name: second, arguments: { city: 'Oslo' } }),
    );
    h.provider.enqueue(answer('Both tools ran.'));
    try {
      await vi.waitFor(() => expect(h.provider.requests.length).toBe(requestsBefore + 2), {
        timeout: 5_000,
      });
      // The reply calling the second tool is in; the tool is not called while the write waits.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(h.tools.calls.some((call) => call.path === '/slow/second')).toBe(false);
      expect(await countTurns(id)).toBe(0);
      await lock.query('COMMIT');
    } finally {
      lock.release();
    }
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Both tools ran.' } });
    expect(h.tools.calls.filter((call) => call.path === '/slow/second')).toHaveLength(1);
    expect(await countTurns(id)).toBe(3);
  });

  it('a turn’s write that fails (the workflow was cancelled meanwhile) aborts the request already sent', async () => {
    const abortedBefore = h.provider.abortedRequests();
    const { id, lock, requestsBefore } = await h.startWithHeldTurnWrite('/slow/held', {
      kind: 'stall',
    });
    try {
      await vi.waitFor(() => expect(h.provider.requests.length).toBe(requestsBefore + 2), {
        timeout: 5_000,
      });
      // Another replica's cancel, committed under the lock: the turn's write then matches no row.
      await lock.query(
        `UPDATE workflows SET status = 'cancelled', finished_at = now(), version = version + 1
          WHERE id = $1`,
        [id],
      );
      await lock.query('COMMIT');
    } finally {
      lock.release();
    }
    // The stalled reply would never end by itself: only the failed write stops it.
    await vi.waitFor(() => expect(h.provider.abortedRequests()).toBe(abortedBefore + 1), {
      timeout: 5_000,
    });
    const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['cancelled']);
    expect(workflow.status).toBe('cancelled');
    expect(await countTurns(id)).toBe(0);
    expect(await eventsAfterTurnOne(id)).toEqual([]);
  });
});
