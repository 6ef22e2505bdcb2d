import type { Logger } from 'pino';
import { costOf, type ModelEntry } from '../catalogue.js';
import { LlmError } from '../errors.js';
import { emptyUsage, type LanguageModel, type StreamPart, type Usage } from '../types.js';
import type { AttemptRecord, CallContext } from './types.js';

export interface AttemptOptions {
  model: LanguageModel;
  entry: ModelEntry;
  /** 1-based count of attempts within this turn. */
  number: number;
  call: { signal: AbortSignal; context: CallContext };
  /** Time the model may take to produce its first part. */
  timeoutMs: number;
  log: Logger;
  recordAttempt?: (record: AttemptRecord) => void;
}

/**
 * One attempt of a turn. The turn stream (turn-stream.ts) iterates `model.stream(request, {
 * signal })` itself and hands each part to `observe` before yielding it,
 * then ends the attempt with `succeeded` or `failed`, which log it and
 * record it in the usage ledger.
 *
 * A plain object, not a generator wrapping the model's stream: that layer
 * put one more async generator hop on every part. A class rather than
 * closures: tsx (which runs bench/llm-router) compiles with esbuild's
 * `keepNames`, which wraps every named closure in a `defineProperty` call
 * (0.37 µs each); the turn and attempt bookkeeping of one call took
 * 15-19 µs written as closures and 5.5 µs as classes. One controller per
 * attempt stays: the first-part timeout needs a signal of its own, and
 * `AbortSignal.any` (18 µs) costs more than a controller and a forwarding
 * listener (3-4 µs).
 */
export class Attempt {
  /**
   * For the model: follows the caller's signal and is aborted with a
   * timeout `LlmError` when no first part comes in time. The adapters hand
   * it to the SDK, which adds a listener it never removes, so it must not
   * outlive the attempt.
   */
  readonly signal: AbortSignal;
  readonly #controller = new AbortController();
  readonly #follow: () => void;
  readonly #firstPartTimer: NodeJS.Timeout;
  readonly #startedAt = new Date();
  readonly #started = performance.now();
  #usage: Usage = emptyUsage();
  #ttftMs: number | null = null;
  #yieldedAny = false;

  constructor(private readonly options: AttemptOptions) {
    const { call, model } = options;
    this.signal = this.#controller.signal;
    this.#follow = () => this.#controller.abort(call.signal.reason);
    if (call.signal.aborted) this.#follow();
    else call.signal.addEventListener('abort', this.#follow, { once: true });
    this.#firstPartTimer = setTimeout(() => {
      this.#controller.abort(
        new LlmError({
          kind: 'timeout',
          provider: model.provider,
          model: model.modelId,
          detail: `no answer within ${options.timeoutMs} ms`,
        }),
      );
    }, options.timeoutMs);
  }

  /** Whether a part has reached the caller: after that, no retry or fallback. */
  get yieldedAny(): boolean {
    return this.#yieldedAny;
  }

  observe(part: StreamPart): void {
    if (this.#ttftMs === null) {
      this.#ttftMs = performance.now() - this.#started;
      clearTimeout(this.#firstPartTimer);
    }
    if (part.type === 'usage') this.#usage = part.usage;
    this.#yieldedAny = true;
  }

  succeeded(): void {
    this.#record('ok');
  }

  /** Records the failure and returns it as an `LlmError`. */
  failed(thrown: unknown): LlmError {
    const error = asLlmError(thrown, this.options.model);
    this.#record(error.kind);
    return error;
  }

  /** Stops the timer and the listener; also for a caller that stops reading early. */
  release(): void {
    clearTimeout(this.#firstPartTimer);
    this.options.call.signal.removeEventListener('abort', this.#follow);
  }

  #record(outcome: AttemptRecord['outcome']): void {
    this.release();
    const { entry, number } = this.options;
    const usage = this.#usage;
    const ttftMs = this.#ttftMs;
    this.options.log.debug(
      { provider: entry.provider, model: entry.name, attempt: number, outcome, ttftMs },
      'model call attempt',
    );
    this.options.recordAttempt?.({
      context: this.options.call.context,
      model: entry.name,
      provider: entry.provider,
      modelId: entry.modelId,
      attempt: number,
      usage,
      costUsd: costOf(entry, usage),
      latencyMs: performance.now() - this.#started,
      ttftMs,
      outcome,
      startedAt: this.#startedAt,
    });
  }
}

/** Adapters throw LlmError; anything else is a bug in one, reported as a provider-side failure that is not retried. */
function asLlmError(error: unknown, model: LanguageModel): LlmError {
  if (error instanceof LlmError) return error;
  return new LlmError({
    kind: 'invalid_request',
    provider: model.provider,
    model: model.modelId,
    detail: `adapter failure: ${error instanceof Error ? error.message : String(error)}`,
    cause: error,
  });
}
