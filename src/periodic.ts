import type { Logger } from 'pino';

/**
 * Work a replica repeats on its own (the retention sweep, the lease
 * reclaim): run once at `start`, then `intervalMs` after each run ends, so
 * runs never overlap however long one takes. A failed run is logged and
 * the next one still comes; the timer never keeps the process alive.
 */
export function createPeriodicTask(options: {
  intervalMs: number;
  run: () => Promise<unknown>;
  log: Logger;
  /** Logged with a failed run's error. */
  failureMessage: string;
}) {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> = Promise.resolve();
  let inRun = false;
  let again = false;
  let stopped = false;

  function schedule(delayMs: number): void {
    timer = setTimeout(() => {
      inRun = true;
      running = options
        .run()
        .catch((error: unknown) => options.log.error({ err: error }, options.failureMessage))
        .finally(() => {
          inRun = false;
          const delay = again ? 0 : options.intervalMs;
          again = false;
          if (!stopped) schedule(delay);
        });
    }, delayMs);
    timer.unref();
  }

  return {
    /** Runs now, then every `intervalMs` after each run; a no-op once started or stopped. */
    start(): void {
      if (timer || stopped) return;
      schedule(0);
    },

    /**
     * Runs as soon as it can, once started: now, or right after the run in
     * progress, instead of `intervalMs` later. Calls before that run are one.
     */
    soon(): void {
      if (!timer || stopped) return;
      if (inRun) {
        again = true;
        return;
      }
      clearTimeout(timer);
      schedule(0);
    },

    /** No run after this; waits for one in progress. */
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
      await running;
    },

    /** Whether `stop` was called (a long run may end early). */
    stopped: (): boolean => stopped,
  };
}
