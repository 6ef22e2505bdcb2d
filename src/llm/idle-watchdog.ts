/**
 * Ends a stream that stalls. The SDKs' own timeout stops at the response
 * headers, so a provider that sends headers and then nothing would hold a
 * call forever; this watchdog aborts the SDK stream's controller when no
 * chunk has arrived for `idleMs` while the adapter was waiting for one, and
 * the adapter, seeing `fired`, reports a timeout.
 *
 * The adapter calls `received`/`waiting` in its own loop over the SDK
 * stream: the wrapping generator this used to be put one more async hop on
 * every chunk. One timer per stream with a lazy deadline: a chunk only notes
 * the time, and the timer, when it fires early, re-arms for the rest
 * (re-creating a timer per chunk cost 1-2.5% of a streamed call in
 * bench/llm-router). A class rather than closures, for the reason given at
 * `Attempt` in router/attempt.ts.
 */
export class IdleWatchdog {
  #fired = false;
  /** Undefined while the consumer holds a chunk: that time is not idle. */
  #waitingSince: number | undefined = performance.now();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: { idleMs: number; controller: AbortController }) {
    this.#timer = setTimeout(() => this.#check(), options.idleMs);
  }

  /** Whether it aborted the stream for being idle. */
  get fired(): boolean {
    return this.#fired;
  }

  /** A chunk arrived. */
  received(): void {
    this.#waitingSince = undefined;
  }

  /** The adapter waits for the next chunk again. */
  waiting(): void {
    this.#waitingSince = performance.now();
  }

  stop(): void {
    clearTimeout(this.#timer);
  }

  #check(): void {
    const idle = this.#waitingSince === undefined ? 0 : performance.now() - this.#waitingSince;
    if (idle < this.options.idleMs) {
      this.#timer = setTimeout(() => this.#check(), this.options.idleMs - idle);
      return;
    }
    this.#fired = true;
    this.options.controller.abort();
  }
}
