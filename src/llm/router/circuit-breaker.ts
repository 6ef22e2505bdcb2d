/**
 * One circuit breaker per provider. Closed: calls go through and consecutive
 * failures are counted. Open (after `failureThreshold` consecutive failures,
 * or at once on an authentication error): the router skips the provider.
 * While open, a probe runs every `probeIntervalMs`; the first probe that
 * succeeds closes the breaker, so a recovered provider comes back even when
 * no request would fail over to it.
 */
export interface BreakerOptions {
  failureThreshold: number;
  probeIntervalMs: number;
  /** A minimal call to the provider; resolves when it answered. */
  probe: () => Promise<void>;
  onChange?: (state: 'open' | 'closed', reason: string) => void;
}

export class CircuitBreaker {
  private consecutiveFailures = 0;
  private open = false;
  private probeTimer: NodeJS.Timeout | undefined;
  private probing = false;
  private closed = false;

  constructor(private readonly options: BreakerOptions) {}

  isOpen(): boolean {
    return this.open;
  }

  recordSuccess(): void {
    this.consecutiveFailures = 0;
    if (this.open) this.close('a call succeeded');
  }

  recordFailure(): void {
    this.consecutiveFailures += 1;
    if (!this.open && this.consecutiveFailures >= this.options.failureThreshold) {
      this.trip(`${this.consecutiveFailures} consecutive failures`);
    }
  }

  /** Opens at once, e.g. when the provider rejected our credentials. */
  trip(reason: string): void {
    if (this.open || this.closed) return;
    this.open = true;
    this.options.onChange?.('open', reason);
    this.scheduleProbe();
  }

  /** Stops the probe timer for good (service shutdown). */
  dispose(): void {
    this.closed = true;
    clearTimeout(this.probeTimer);
  }

  private close(reason: string): void {
    this.open = false;
    this.consecutiveFailures = 0;
    clearTimeout(this.probeTimer);
    this.options.onChange?.('closed', reason);
  }

  private scheduleProbe(): void {
    clearTimeout(this.probeTimer);
    if (this.closed) return;
    this.probeTimer = setTimeout(() => void this.runProbe(), this.options.probeIntervalMs);
    // A waiting probe must not keep the process alive at shutdown.
    this.probeTimer.unref();
  }

  private async runProbe(): Promise<void> {
    if (this.probing || !this.open || this.closed) return;
    this.probing = true;
    try {
      await this.options.probe();
      this.close('the probe succeeded');
    } catch {
      // Still failing: stay open and probe again later. The probe's error
      // is the provider's ongoing outage, already reported when it opened.
      this.scheduleProbe();
    } finally {
      this.probing = false;
    }
  }
}
