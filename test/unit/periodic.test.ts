import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { createPeriodicTask } from '../../src/periodic.js';

/** A task a minute apart whose runs the test holds open until it lets them end. */
function heldTask() {
  const ends: Array<() => void> = [];
  const task = createPeriodicTask({
    intervalMs: 60_000,
    run: () => new Promise<void>((resolve) => ends.push(resolve)),
    log: pino({ level: 'silent' }),
    failureMessage: 'the test task failed',
  });
  return { task, ends };
}

describe('periodic tasks', () => {
  it('soon() runs at once between runs, and right after the run in progress during one; nothing before start or after stop', async () => {
    const { task, ends } = heldTask();
    task.soon();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ends).toHaveLength(0);

    task.start();
    await vi.waitFor(() => expect(ends).toHaveLength(1));
    // During the run: twice, one run after it.
    task.soon();
    task.soon();
    ends[0]?.();
    await vi.waitFor(() => expect(ends).toHaveLength(2));
    ends[1]?.();
    // Between runs, the next a minute away: at once.
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ends).toHaveLength(2);
    task.soon();
    await vi.waitFor(() => expect(ends).toHaveLength(3));
    ends[2]?.();

    await task.stop();
    task.soon();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ends).toHaveLength(3);
  });
});
