import { afterEach, describe, expect, it, vi } from 'vitest';
import { CircuitBreaker } from '../../../src/llm/router/circuit-breaker.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('CircuitBreaker', () => {
  it('opens after N consecutive failures; a success in between resets the count', () => {
    const breaker = new CircuitBreaker({
      failureThreshold: 3,
      probeIntervalMs: 60_000,
      probe: async () => undefined,
    });
    breaker.recordFailure();
    breaker.recordFailure();
    breaker.recordSuccess();
    breaker.recordFailure();
    breaker.recordFailure();
    expect(breaker.isOpen()).toBe(false);
    breaker.recordFailure();
    expect(breaker.isOpen()).toBe(true);
    breaker.dispose();
  });

  it('probes on a schedule while open and closes when a probe succeeds', async () => {
    vi.useFakeTimers();
    let healthy = false;
    let probes = 0;
    const changes: string[] = [];
    const breaker = new CircuitBreaker({
      failureThreshold: 1,
      probeIntervalMs: 1000,
      probe: async () => {
        probes += 1;
        if (!healthy) throw new Error('still down');
      },
      onChange: (state) => changes.push(state),
    });
    breaker.trip('credentials rejected');
    await vi.advanceTimersByTimeAsync(1000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(probes).toBe(2);
    expect(breaker.isOpen()).toBe(true);
    healthy = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(breaker.isOpen()).toBe(false);
    expect(changes).toEqual(['open', 'closed']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(probes).toBe(3);
    breaker.dispose();
  });

  it('stops probing once disposed', async () => {
    vi.useFakeTimers();
    let probes = 0;
    const breaker = new CircuitBreaker({
      failureThreshold: 1,
      probeIntervalMs: 100,
      probe: async () => {
        probes += 1;
        throw new Error('down');
      },
    });
    breaker.recordFailure();
    breaker.dispose();
    await vi.advanceTimersByTimeAsync(1000);
    expect(probes).toBe(0);
  });
});
