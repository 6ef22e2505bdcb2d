/**
 * Aborts a stream that stalls. The SDKs' own timeout stops at the response
 * headers, so a provider that sends headers and then nothing would hold a
 * call forever; this watchdog aborts when no chunk has arrived for
 * `idleMs`, and the adapter reports a timeout.
 */
export async function* withIdleWatchdog<T>(
  source: AsyncIterable<T>,
  options: { idleMs: number; onIdle: () => void },
): AsyncGenerator<T> {
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(options.onIdle, options.idleMs);
  };
  arm();
  try {
    for await (const item of source) {
      clearTimeout(timer);
      yield item;
      arm();
    }
  } finally {
    clearTimeout(timer);
  }
}
