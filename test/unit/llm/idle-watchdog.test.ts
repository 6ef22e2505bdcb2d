import { describe, expect, it, vi } from 'vitest';
import { IdleWatchdog } from '../../../src/llm/idle-watchdog.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('IdleWatchdog', () => {
  it('aborts the controller once no chunk arrives for idleMs while waiting', async () => {
    const controller = new AbortController();
    const watchdog = new IdleWatchdog({ idleMs: 50, abort: () => controller.abort() });
    watchdog.received();
    watchdog.waiting();
    await sleep(150);
    watchdog.stop();
    expect(watchdog.fired).toBe(true);
    expect(controller.signal.aborted).toBe(true);
  });

  it('does not fire while chunks keep coming, nor while the consumer holds a chunk', async () => {
    const controller = new AbortController();
    const watchdog = new IdleWatchdog({ idleMs: 40, abort: () => controller.abort() });
    for (let chunk = 0; chunk < 7; chunk++) {
      await sleep(10);
      watchdog.received();
      if (chunk === 2) await sleep(120);
      watchdog.waiting();
    }
    watchdog.stop();
    expect(watchdog.fired).toBe(false);
    expect(controller.signal.aborted).toBe(false);
  });

  it('counts idle time from the last chunk, not from the start', async () => {
    const controller = new AbortController();
    const watchdog = new IdleWatchdog({ idleMs: 100, abort: () => controller.abort() });
    await sleep(50);
    watchdog.received();
    watchdog.waiting();
    // 100 ms after the start but only 50 ms after the chunk: not idle yet.
    await sleep(50);
    expect(watchdog.fired).toBe(false);
    await sleep(120);
    watchdog.stop();
    expect(watchdog.fired).toBe(true);
  });

  it('counts idle time from when the consumer asks again, not from the chunk it held', () => {
    vi.useFakeTimers();
    try {
      const controller = new AbortController();
      const watchdog = new IdleWatchdog({ idleMs: 100, abort: () => controller.abort() });
      watchdog.received();
      vi.advanceTimersByTime(130);
      watchdog.waiting();
      // Held for 130 ms, then 99 ms of waiting: less than idleMs of silence.
      vi.advanceTimersByTime(99);
      expect(watchdog.fired).toBe(false);
      // Caught within 1¼ × idleMs of silence.
      vi.advanceTimersByTime(26);
      expect(watchdog.fired).toBe(true);
      expect(controller.signal.aborted).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it('stop() cancels the timer', async () => {
    const controller = new AbortController();
    const watchdog = new IdleWatchdog({ idleMs: 20, abort: () => controller.abort() });
    watchdog.stop();
    await sleep(60);
    expect(watchdog.fired).toBe(false);
  });
});
