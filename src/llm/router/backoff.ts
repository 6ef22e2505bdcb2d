/**
 * Exponential backoff with full jitter (a uniformly random wait between 0
 * and the exponential ceiling): spreads the retries of many clients hit by
 * the same outage instead of synchronising them. A provider's
 * `retry-after` wins when it asks for longer.
 */
export function retryDelayMs(options: {
  /** 0 for the first retry. */
  retry: number;
  baseMs: number;
  maxMs: number;
  retryAfterMs?: number;
  random: () => number;
}): number {
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** options.retry);
  const jittered = Math.floor(options.random() * ceiling);
  return Math.max(jittered, options.retryAfterMs ?? 0);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first; never leaves a timer behind. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
