/** The timer looks this many times per idle period: a stall is caught within 1¼ × `idleMs`. */
const CHECKS_PER_IDLE_PERIOD = 4;

/**
 * Ends a stream that stalls. The SDKs' own timeout stops at the response
 * headers, so a provider that sends headers and then nothing would hold a
 * call forever; this watchdog ends the stream (`abort`) once no
 * chunk has arrived for at least `idleMs` while the adapter was waiting
 * for one, and the adapter, seeing `fired`, reports a timeout.
 *
 * The adapter calls `received`/`waiting` in its own loop over what it
 * reads (the OpenAI adapter the response body, the Anthropic one its SDK's
 * stream): the wrapping generator this used to be put one more async hop
 * on every chunk. A chunk costs a flag and a counter, no clock: one interval
 * per stream looks every quarter of `idleMs` and fires after four looks in
 * a row found the adapter still waiting since the look before, so the
 * silence lasted between `idleMs` and 1¼ × `idleMs`. (Re-creating a timer
 * per chunk cost 1-2.5% of a streamed call in bench/llm-router; reading the
 * clock twice per chunk, as the lazy deadline before this did, ~6 µs of a
 * 60-chunk call.) A class rather than closures, for the reason given at
 * `Attempt` in router/attempt.ts.
 */
export class IdleWatchdog {
  #fired = false;
  /** Times the adapter started waiting; a look that finds it changed is not quiet. */
  #waits = 0;
  #waitsAtLastLook = 0;
  /** True while the consumer holds a chunk: that time is not idle. */
  #holding = false;
  #quietLooks = 0;
  readonly #timer: NodeJS.Timeout;

  constructor(
    private readonly options: {
      idleMs: number;
      /** Ends the stream being read, so that the adapter's loop over it stops. */
      abort: () => void;
    },
  ) {
    this.#timer = setInterval(() => this.#look(), options.idleMs / CHECKS_PER_IDLE_PERIOD);
  }

  /** Whether it aborted the stream for being idle. */
  get fired(): boolean {
    return this.#fired;
  }

  /** A chunk arrived. */
  received(): void {
    this.#holding = true;
  }

  /** The adapter waits for the next chunk again. */
  waiting(): void {
    this.#holding = false;
    this.#waits += 1;
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  #look(): void {
    if (this.#holding || this.#waits !== this.#waitsAtLastLook) {
      this.#waitsAtLastLook = this.#waits;
      this.#quietLooks = 0;
    } else {
      this.#quietLooks += 1;
    }
    if (this.#quietLooks < CHECKS_PER_IDLE_PERIOD) return;
    this.stop();
    this.#fired = true;
    this.options.abort();
  }
}
