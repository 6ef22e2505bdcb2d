import type { Logger } from 'pino';
import { type Catalogue, costOf, type ModelEntry } from '../catalogue.js';
import { LlmError } from '../errors.js';
import type { LanguageModel, ModelRequest, StreamPart } from '../types.js';
import { type AttemptOutcome, newOutcome, runAttempt } from './attempt.js';
import { abortableSleep, retryDelayMs } from './backoff.js';
import { CircuitBreaker } from './circuit-breaker.js';
import type { AttemptRecord, CallContext, RetryPolicy, RouterEvent } from './types.js';

export interface RouterOptions {
  catalogue: Catalogue;
  /** The adapter behind each catalogue model, by catalogue name. */
  languageModels: Map<string, LanguageModel>;
  policy: RetryPolicy;
  log: Logger;
  /** Called once per attempt, success or not; must not throw (the ledger queues). */
  recordAttempt?: (record: AttemptRecord) => void;
  /** For tests: jitter source. */
  random?: () => number;
}

export interface RouterCall {
  /** Catalogue name of the first model of the chain. */
  model: string;
  request: ModelRequest;
  signal: AbortSignal;
  context: CallContext;
  /** Retries and fallbacks, for the WorkflowTracker's llm_retry and llm_fallback events. */
  onEvent?: (event: RouterEvent) => void;
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
 * The only retry layer (the SDKs' own retries are off). A turn walks a
 * chain of models: the requested one, then its fallbacks (and, on a
 * context-length error, its larger-context model). Each model is retried
 * with backoff on retryable errors, every attempt counts against one cap
 * for the whole turn, providers with an open breaker are skipped, and once
 * a part has reached the caller a failure ends the turn with an `error`
 * part instead of splicing another model's output onto it.
 */
export function createModelRouter(options: RouterOptions) {
  const { catalogue, policy, log } = options;
  const random = options.random ?? Math.random;
  const entries = new Map(catalogue.models.map((entry) => [entry.name, entry]));
  const breakers = new Map(
    catalogue.providers.map((provider) => [provider.name, breakerFor(provider.name)]),
  );

  function breakerFor(provider: string): CircuitBreaker {
    const probeModel = catalogue.models.find((entry) => entry.provider === provider);
    return new CircuitBreaker({
      failureThreshold: policy.breakerFailureThreshold,
      probeIntervalMs: policy.breakerProbeIntervalMs,
      probe: async () => {
        const model = probeModel && options.languageModels.get(probeModel.name);
        if (!model) throw new Error(`no model to probe provider ${provider}`);
        const signal = AbortSignal.timeout(policy.attemptTimeoutMs);
        const probeRequest: ModelRequest = {
          messages: [{ role: 'user', content: 'ping' }],
          maxOutputTokens: 1,
        };
        for await (const _part of model.stream(probeRequest, { signal })) {
          // Drain: the probe succeeds when the stream ends without throwing.
        }
      },
      onChange: (state, reason) =>
        log[state === 'open' ? 'warn' : 'info'](
          { provider, reason },
          `circuit ${state} for provider`,
        ),
    });
  }

  function requireEntry(name: string): ModelEntry {
    const entry = entries.get(name);
    if (!entry) throw new Error(`model "${name}" is not in the catalogue`);
    return entry;
  }

  async function* stream(call: RouterCall): AsyncGenerator<StreamPart> {
    const chain = [call.model, ...requireEntry(call.model).fallbacks];
    const tried = new Set<string>();
    let attempts = 0;
    let lastError: LlmError | undefined;

    for (let index = 0; index < chain.length && attempts < policy.maxTotalAttempts; index++) {
      const name = chain[index] as string;
      if (tried.has(name)) continue;
      tried.add(name);
      const entry = requireEntry(name);
      const next = chain.slice(index + 1).find((candidate) => !tried.has(candidate));
      const breaker = breakers.get(entry.provider);
      const model = options.languageModels.get(name);
      if (!model || breaker?.isOpen()) {
        lastError = unavailable(
          entry,
          model ? 'its provider’s circuit is open' : 'no adapter is configured',
        );
        if (next)
          call.onEvent?.({ type: 'fallback', from: name, to: next, reason: 'circuit_open' });
        continue;
      }
      const request: ModelRequest = {
        ...call.request,
        maxOutputTokens: Math.min(
          call.request.maxOutputTokens ?? entry.maxOutputTokens,
          entry.maxOutputTokens,
        ),
      };

      for (let retry = 0; attempts < policy.maxTotalAttempts; retry++) {
        attempts += 1;
        const outcome = newOutcome();
        const startedAt = new Date();
        const started = performance.now();
        try {
          yield* runAttempt({
            model,
            request,
            signal: call.signal,
            timeoutMs: policy.attemptTimeoutMs,
            outcome,
          });
          breaker?.recordSuccess();
          record({ call, entry, attempt: attempts, outcome, startedAt, started, result: 'ok' });
          return;
        } catch (thrown) {
          const error = thrown as LlmError;
          lastError = error;
          record({
            call,
            entry,
            attempt: attempts,
            outcome,
            startedAt,
            started,
            result: error.kind,
          });
          if (BREAKER_KINDS.has(error.kind)) breaker?.recordFailure();
          if (error.kind === 'authentication')
            breaker?.trip('the provider rejected our credentials');
          if (call.signal.aborted || error.kind === 'cancelled' || outcome.yieldedAny) {
            yield { type: 'error', error };
            return;
          }
          if (error.kind === 'context_length_exceeded') {
            if (entry.largerContext && !tried.has(entry.largerContext)) {
              chain.splice(index + 1, 0, entry.largerContext);
              call.onEvent?.({
                type: 'fallback',
                from: name,
                to: entry.largerContext,
                reason: 'context_length',
                error,
              });
              break;
            }
            yield { type: 'error', error };
            return;
          }
          const fallsThrough = error.kind === 'authentication';
          if (!error.retryable && !fallsThrough) {
            yield { type: 'error', error };
            return;
          }
          const waitTooLong = (error.retryAfterMs ?? 0) > policy.maxRetryAfterMs;
          if (
            fallsThrough ||
            waitTooLong ||
            retry >= policy.maxRetriesPerModel ||
            breaker?.isOpen()
          ) {
            if (next && attempts < policy.maxTotalAttempts) {
              call.onEvent?.({ type: 'fallback', from: name, to: next, reason: 'error', error });
            }
            break;
          }
          if (attempts >= policy.maxTotalAttempts) break;
          const delayMs = retryDelayMs({
            retry,
            baseMs: policy.backoffBaseMs,
            maxMs: policy.backoffMaxMs,
            retryAfterMs: error.retryAfterMs,
            random,
          });
          call.onEvent?.({ type: 'retry', model: name, attempt: attempts + 1, delayMs, error });
          try {
            await abortableSleep(delayMs, call.signal);
          } catch {
            yield { type: 'error', error: cancelled(entry) };
            return;
          }
        }
      }
    }
    yield {
      type: 'error',
      error: lastError ?? unavailable(requireEntry(call.model), 'no attempt was made'),
    };
  }

  function record(input: {
    call: RouterCall;
    entry: ModelEntry;
    attempt: number;
    outcome: AttemptOutcome;
    startedAt: Date;
    started: number;
    result: AttemptRecord['outcome'];
  }): void {
    const { entry, outcome } = input;
    log.debug(
      {
        provider: entry.provider,
        model: entry.name,
        attempt: input.attempt,
        outcome: input.result,
        ttftMs: outcome.ttftMs,
      },
      'model call attempt',
    );
    options.recordAttempt?.({
      context: input.call.context,
      model: entry.name,
      provider: entry.provider,
      modelId: entry.modelId,
      attempt: input.attempt,
      usage: outcome.usage,
      costUsd: costOf(entry, outcome.usage),
      latencyMs: performance.now() - input.started,
      ttftMs: outcome.ttftMs,
      outcome: input.result,
      startedAt: input.startedAt,
    });
  }

  return {
    stream,
    entry: (name: string): ModelEntry | undefined => entries.get(name),
    isProviderOpen: (provider: string): boolean => breakers.get(provider)?.isOpen() ?? false,
    /** Stops the breakers' probe timers. */
    dispose(): void {
      for (const breaker of breakers.values()) breaker.dispose();
    },
  };
}

export type ModelRouter = ReturnType<typeof createModelRouter>;

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
