import type { ModelEntry, ProviderKind } from '../catalogue.js';
import { LlmError } from '../errors.js';
import { type InputEstimate, outputRoom } from '../output-room.js';
import type { LanguageModel, ModelRequest } from '../types.js';
import { abortableSleep, retryDelayMs } from './backoff.js';
import type { CircuitBreaker } from './circuit-breaker.js';
import type { RetryPolicy, RouterCall } from './types.js';

/** What a turn does next: one more attempt, or end with this error part. */
export type TurnStep =
  | {
      type: 'attempt';
      model: LanguageModel;
      entry: ModelEntry;
      request: ModelRequest;
      /** 1-based count of attempts within this turn. */
      number: number;
    }
  | { type: 'failed'; error: LlmError };

type AttemptStep = TurnStep & { type: 'attempt' };

/** What every turn shares: the router's policy, models and breakers. */
export interface TurnRouting {
  policy: RetryPolicy;
  random: () => number;
  languageModels: Map<string, LanguageModel>;
  breakers: Map<string, CircuitBreaker>;
  requireEntry(name: string): ModelEntry;
  /** The kind of a configured provider, by name: whose tokens its models count. */
  kindOf(provider: string): ProviderKind;
}

/** Provider-side failures that count against a provider's breaker. */
const BREAKER_KINDS = new Set([
  'rate_limited',
  'overloaded',
  'server_error',
  'timeout',
  'connection',
  'stream_interrupted',
]);

/**
 * The decisions of one turn, apart from the generator that streams it: the
 * chain of models still to try, the attempt cap, retries with backoff and
 * fallbacks. `router.stream` is then a short loop over `TurnStep`s. A class
 * rather than closures, for the reason given at `Attempt`.
 */
export class Turn {
  readonly #chain: string[];
  readonly #tried = new Set<string>();
  #index = -1;
  #retry = 0;
  #attempts = 0;
  #lastError: LlmError | undefined;
  /** The request's input as the latest model's kind counts it: the caller's, until a model of another kind. */
  #input: InputEstimate | undefined;

  constructor(
    private readonly call: RouterCall,
    private readonly routing: TurnRouting,
  ) {
    this.#chain = [call.model, ...routing.requireEntry(call.model).fallbacks];
    this.#input = call.input;
  }

  first(): TurnStep {
    return this.#nextModel();
  }

  succeeded(step: AttemptStep): void {
    this.routing.breakers.get(step.entry.provider)?.recordSuccess();
  }

  /**
   * After a failed attempt: the error ends the turn, or the next model is
   * tried, or (after the backoff) the same one again. Once a part has
   * reached the caller, the failure ends the turn: another model's output
   * is never spliced onto it.
   */
  async failed(step: AttemptStep, error: LlmError, yieldedAny: boolean): Promise<TurnStep> {
    const { call } = this;
    const { policy } = this.routing;
    const { entry } = step;
    const breaker = this.routing.breakers.get(entry.provider);
    this.#lastError = error;
    if (BREAKER_KINDS.has(error.kind)) breaker?.recordFailure();
    if (error.kind === 'authentication') breaker?.trip('the provider rejected our credentials');
    if (call.signal.aborted || error.kind === 'cancelled' || yieldedAny) {
      return { type: 'failed', error };
    }
    if (error.kind === 'context_length_exceeded') {
      const larger = entry.largerContext;
      if (!larger || this.#tried.has(larger)) return { type: 'failed', error };
      this.#chain.splice(this.#index + 1, 0, larger);
      call.onEvent?.({
        type: 'fallback',
        from: entry.name,
        to: larger,
        reason: 'context_length',
        error,
      });
      return this.#nextModel();
    }
    const fallsThrough = error.kind === 'authentication';
    if (!error.retryable && !fallsThrough) return { type: 'failed', error };
    const waitTooLong = (error.retryAfterMs ?? 0) > policy.maxRetryAfterMs;
    if (
      fallsThrough ||
      waitTooLong ||
      this.#retry >= policy.maxRetriesPerModel ||
      breaker?.isOpen()
    ) {
      const next = this.#untriedAfterCurrent();
      if (next && this.#attempts < policy.maxTotalAttempts) {
        call.onEvent?.({ type: 'fallback', from: entry.name, to: next, reason: 'error', error });
      }
      return this.#nextModel();
    }
    if (this.#attempts >= policy.maxTotalAttempts) return { type: 'failed', error };
    const delayMs = retryDelayMs({
      retry: this.#retry,
      baseMs: policy.backoffBaseMs,
      maxMs: policy.backoffMaxMs,
      retryAfterMs: error.retryAfterMs,
      random: this.routing.random,
    });
    call.onEvent?.({
      type: 'retry',
      model: entry.name,
      attempt: this.#attempts + 1,
      delayMs,
      error,
    });
    try {
      await abortableSleep(delayMs, call.signal);
    } catch {
      return { type: 'failed', error: cancelled(entry) };
    }
    this.#retry += 1;
    return { ...step, number: ++this.#attempts };
  }

  /**
   * The next untried model of the chain whose provider is available and
   * whose window holds the request, with the request asking for the output
   * that model has room for (output-room.ts).
   */
  #nextModel(): TurnStep {
    const { call, routing } = this;
    while (++this.#index < this.#chain.length && this.#attempts < routing.policy.maxTotalAttempts) {
      const name = this.#chain[this.#index] as string;
      if (this.#tried.has(name)) continue;
      this.#tried.add(name);
      const entry = routing.requireEntry(name);
      const model = routing.languageModels.get(name);
      if (!model || routing.breakers.get(entry.provider)?.isOpen()) {
        this.#lastError = unavailable(
          entry,
          model ? 'its provider’s circuit is open' : 'no adapter is configured',
        );
        const next = this.#untriedAfterCurrent();
        if (next)
          call.onEvent?.({ type: 'fallback', from: name, to: next, reason: 'circuit_open' });
        continue;
      }
      const room = outputRoom({
        request: call.request,
        limits: entry,
        kind: routing.kindOf(entry.provider),
        input: this.#input,
        tokenCounts: call.tokenCounts,
      });
      this.#input = room.input;
      // The model asked for is sent even a request its window cannot hold:
      // the caller sized the request by that window, and its refusal is what
      // the tool loop recovers from (condensing). A fallback stands in for
      // one turn; sent what it cannot hold, it would only be refused, and
      // its refusal would end the turn before the next model of the chain.
      if (!room.fits && name !== call.model) {
        const next = this.#untriedAfterCurrent();
        if (next)
          call.onEvent?.({ type: 'fallback', from: name, to: next, reason: 'context_window' });
        continue;
      }
      this.#retry = 0;
      const request: ModelRequest = { ...call.request, maxOutputTokens: room.maxOutputTokens };
      return { type: 'attempt', model, entry, request, number: ++this.#attempts };
    }
    return {
      type: 'failed',
      error:
        this.#lastError ?? unavailable(routing.requireEntry(call.model), 'no attempt was made'),
    };
  }

  #untriedAfterCurrent(): string | undefined {
    return this.#chain.slice(this.#index + 1).find((candidate) => !this.#tried.has(candidate));
  }
}

function unavailable(entry: ModelEntry, detail: string): LlmError {
  return new LlmError({
    kind: 'unavailable',
    provider: entry.provider,
    model: entry.modelId,
    detail,
  });
}

function cancelled(entry: ModelEntry): LlmError {
  return new LlmError({ kind: 'cancelled', provider: entry.provider, model: entry.modelId });
}
