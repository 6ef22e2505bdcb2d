import type { Logger } from 'pino';
import { costOf, type ModelEntry } from '../catalogue.js';
import { LlmError } from '../errors.js';
import { maxOutputChars, overlongOutputDetail } from '../output-bound.js';
import { emptyUsage, type LanguageModel, type StreamPart, type Usage } from '../types.js';
import type { AttemptRecord, CallContext } from './types.js';

export interface AttemptOptions {
  model: LanguageModel;
  entry: ModelEntry;
  /** 1-based count of attempts within this turn. */
  number: number;
  call: { signal: AbortSignal; context: CallContext };
  /** Time the model may take to start its answer (`answerStarted`). */
  timeoutMs: number;
  /** Time the model may take to the end of its stream. */
  streamMaxMs: number;
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
   * timeout `LlmError` when the answer does not start in time. The adapters hand
   * it to the SDK, which adds a listener it never removes, so it must not
   * outlive the attempt.
   */
  readonly signal: AbortSignal;
  readonly #controller = new AbortController();
  readonly #follow: () => void;
  /** Until the answer starts, the first-part timeout; then the stream's deadline. */
  #timer: NodeJS.Timeout;
  #released = false;
  /** Characters of output so far: text and tool-call arguments. */
  #outputChars = 0;
  readonly #startedAt = new Date();
  readonly #started = performance.now();
  #usage: Usage = emptyUsage();
  /** The provider reported usage (a part or `usageReported`); and whether a part brought it to the caller. */
  #usageReported = false;
  #usageYielded = false;
  #ttftMs: number | null = null;
  #yieldedAny = false;
  /** Set when the attempt ended itself (a bound passed): the turn stream fails it at the next part. */
  ended: LlmError | undefined;

  constructor(private readonly options: AttemptOptions) {
    const { call } = options;
    this.signal = this.#controller.signal;
    this.#follow = () => this.#controller.abort(call.signal.reason);
    if (call.signal.aborted) this.#follow();
    else call.signal.addEventListener('abort', this.#follow, { once: true });
    this.#timer = setTimeout(
      () => this.#fail('timeout', `no answer within ${options.timeoutMs} ms`),
      options.timeoutMs,
    );
  }

  /** Whether a part has reached the caller: after that, no retry or fallback. */
  get yieldedAny(): boolean {
    return this.#yieldedAny;
  }

  /**
   * The provider started its answer: the adapter says so
   * (`StreamOptions.onAnswerStart`) before a tool call whose arguments
   * are still streaming is a part, else the first part does. The
   * first-part timeout then gives way to the stream's deadline; the idle
   * watchdog bounds the gaps. Not after the attempt ended or was
   * released: the timer set here would outlive it.
   */
  readonly answerStarted = (): void => {
    if (this.#ttftMs !== null || this.ended || this.#released) return;
    this.#ttftMs = performance.now() - this.#started;
    clearTimeout(this.#timer);
    const { streamMaxMs } = this.options;
    this.#timer = setTimeout(
      () => this.#fail('timeout', `the stream did not end within ${streamMaxMs} ms`),
      Math.max(0, streamMaxMs - this.#ttftMs),
    );
  };

  /**
   * The provider reported the call's usage so far, while it streams
   * (`StreamOptions.onUsage`): what the attempt used should it fail before
   * its `usage` part, as its ledger row and the turn's caller count it.
   */
  readonly usageReported = (usage: Usage): void => {
    this.#usage = usage;
    this.#usageReported = true;
  };

  /**
   * The usage the provider reported that no part brought to the caller:
   * a failed attempt's (Anthropic reports the input side as its stream
   * opens), which the turn stream then yields as a part of its own.
   */
  get unyieldedUsage(): Usage | undefined {
    return this.#usageReported && !this.#usageYielded ? this.#usage : undefined;
  }

  /**
   * Besides its timing and usage, bounds what a provider that ignores its
   * limits can make of a call: one that streams without end (an idle
   * watchdog sees its chunks) fails at `streamMaxMs` as a timeout, and one
   * whose output, text and tool-call arguments together, runs past
   * `maxOutputChars` fails as a cut-off answer. The adapters bound the
   * arguments they assemble too (output-bound.ts), as a call's come out
   * whole only at its end.
   */
  observe(part: StreamPart): void {
    if (this.#ttftMs === null) this.answerStarted();
    const chars = outputCharsOf(part);
    if (chars > 0) {
      this.#outputChars += chars;
      const { maxOutputTokens } = this.options.entry;
      if (this.#outputChars > maxOutputChars(maxOutputTokens))
        this.#fail('stream_interrupted', overlongOutputDetail('the answer', maxOutputTokens));
    }
    if (part.type === 'usage') {
      this.#usage = part.usage;
      this.#usageReported = true;
      this.#usageYielded = true;
    }
    this.#yieldedAny = true;
  }

  #fail(kind: 'timeout' | 'stream_interrupted', detail: string): void {
    const { model } = this.options;
    this.ended = new LlmError({ kind, provider: model.provider, model: model.modelId, detail });
    this.#controller.abort(this.ended);
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
    this.#released = true;
    clearTimeout(this.#timer);
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

/**
 * What a part adds to the output's size: the characters the model sent.
 * A call's arguments as the adapter received them (and counted them), not
 * re-serialized from the parsed arguments.
 */
function outputCharsOf(part: StreamPart): number {
  switch (part.type) {
    case 'text-delta':
      return part.text.length;
    case 'tool-call':
      return part.argumentChars;
    case 'tool-call-invalid':
      return part.rawArguments.length;
    default:
      return 0;
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
