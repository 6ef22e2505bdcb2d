/**
 * `work`'s value, or `timedOut` once `ms` have passed without one: how
 * long a caller waits, not how long the work runs (it goes on, and its
 * failure after the deadline is the caller's to handle or ignore). A
 * failure before the deadline rejects. The timer is cleared either way.
 */
export async function within<T, U = undefined>(
  work: Promise<T>,
  ms: number,
  timedOut?: U,
): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<U>((resolve) => {
    timer = setTimeout(() => resolve(timedOut as U), Math.max(0, ms));
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
