import { describe, expect, it } from 'vitest';
import { withIdleWatchdog } from '../../../src/llm/idle-watchdog.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function* chunks(delays: number[]): AsyncGenerator<number> {
  for (const [index, delay] of delays.entries()) {
    await sleep(delay);
    yield index;
  }
}

describe('withIdleWatchdog', () => {
  it('fires when the source sends nothing for idleMs', async () => {
    let fired = 0;
    const controller = new AbortController();
    const stalled = async function* () {
      yield 0;
      await new Promise((resolve) => controller.signal.addEventListener('abort', resolve));
    };
    const seen: number[] = [];
    for await (const item of withIdleWatchdog(stalled(), {
      idleMs: 50,
      onIdle: () => {
        fired += 1;
        controller.abort();
      },
    })) {
      seen.push(item);
    }
    expect(seen).toEqual([0]);
    expect(fired).toBe(1);
  });

  it('does not fire while chunks keep coming, nor while the consumer holds a chunk', async () => {
    let fired = 0;
    const seen: number[] = [];
    for await (const item of withIdleWatchdog(chunks([10, 10, 10, 10, 10, 10, 10]), {
      idleMs: 40,
      onIdle: () => {
        fired += 1;
      },
    })) {
      seen.push(item);
      if (item === 2) await sleep(120);
    }
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(fired).toBe(0);
  });
});
