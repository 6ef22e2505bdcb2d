import type { Logger } from 'pino';
import type { Catalogue, ModelEntry } from '../catalogue.js';
import type { LlmError } from '../errors.js';
import type { LanguageModel, ModelRequest, StreamPart } from '../types.js';
import { Attempt } from './attempt.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { Turn, type TurnRouting } from './turn.js';
import type { AttemptRecord, RetryPolicy, RouterCall } from './types.js';

export type { RouterCall } from './types.js';

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

  const routing: TurnRouting = {
    policy,
    random,
    languageModels: options.languageModels,
    breakers,
    requireEntry,
  };

  /**
   * Streams one turn: the only generator between the caller and the
   * adapter. The attempt is a plain object this loop feeds each part to,
   * and `Turn` decides what follows a failure. The generator layer an
   * attempt used to be (`runAttempt`, with its own AbortController) cost
   * 20-25 µs per 60-chunk call of bench/llm-router's reply (in-process A/B
   * runs against the bare SDK).
   */
  async function* stream(call: RouterCall): AsyncGenerator<StreamPart> {
    const turn = new Turn(call, routing);
    let step = turn.first();
    while (step.type === 'attempt') {
      const attempt = new Attempt({
        model: step.model,
        entry: step.entry,
        number: step.number,
        call,
        timeoutMs: policy.attemptTimeoutMs,
        log,
        recordAttempt: options.recordAttempt,
      });
      let error: LlmError;
      try {
        for await (const part of step.model.stream(step.request, { signal: attempt.signal })) {
          attempt.observe(part);
          yield part;
        }
        attempt.succeeded();
        turn.succeeded(step);
        return;
      } catch (thrown) {
        error = attempt.failed(thrown);
      } finally {
        attempt.release();
      }
      step = await turn.failed(step, error, attempt.yieldedAny);
    }
    yield { type: 'error', error: step.error };
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
