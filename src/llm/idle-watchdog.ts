/**
 * Aborts a stream that stalls. The SDKs' own timeout stops at the response
 * headers, so a provider that sends headers and then nothing would hold a
 * call forever; this watchdog calls `onIdle` when no chunk has arrived for
 * `idleMs` while we were waiting for one, and the adapter reports a timeout.
 *
 * One timer per stream with a lazy deadline: a chunk only notes the time,
 * and the timer, when it fires early, re-arms for the rest. Re-creating a
 * timer per chunk cost 1-2.5% of a streamed call in bench/llm-router. Time
 * the consumer spends holding a chunk does not count as idle.
 */
export async function* withIdleWatchdog<T>(
  source: AsyncIterable<T>,
  options: { idleMs: number; onIdle: () => void },
): AsyncGenerator<T> {
  let waitingSince = performance.now();
  let waiting = true;
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    timer = undefined;
    if (!waiting) return;
    const idle = performance.now() - waitingSince;
    if (idle >= options.idleMs) options.onIdle();
    else timer = setTimeout(check, options.idleMs - idle);
  };
  timer = setTimeout(check, options.idleMs);
  try {
    for await (const item of source) {
      waiting = false;
      yield item;
      waiting = true;
      waitingSince = performance.now();
      timer ??= setTimeout(check, options.idleMs);
    }
  } finally {
    clearTimeout(timer);
  }
}
