import type { Logger } from 'pino';
import type { Catalogue, ModelEntry, ProviderKind } from '../catalogue.js';
import type { LanguageModel, ModelRequest } from '../types.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { Turn, type TurnRouting } from './turn.js';
import { TurnStream } from './turn-stream.js';
import type { AttemptRecord, RetryPolicy, RouterCall, RouterStream } from './types.js';

export type { RouterCall, RouterStream } from './types.js';

export interface RouterOptions {
  catalogue: Catalogue;
  /** The adapter behind each catalogue model, by catalogue name. */
  languageModels: Map<string, LanguageModel>;
  policy: RetryPolicy;
  log: Logger;
  /** Called once per attempt, success or not; must not throw (the ledger queues). */
  recordAttempt?: (record: AttemptRecord) => void;
  /**
   * Called once per probe of an open breaker (no workflow's nor tenant's,
   * so not in the usage ledger: the metrics count them); must not throw.
   */
  recordProbe?: (probe: ProbeRecord) => void;
  /** For tests: jitter source. */
  random?: () => number;
}

/** A probe of a provider whose breaker is open: a one-token call to its first catalogue model. */
export interface ProbeRecord {
  provider: string;
  model: string;
  outcome: 'ok' | 'failed';
  latencyMs: number;
}

/**
 * The only retry layer (the SDKs' own retries are off). A turn walks a
 * chain of models: the requested one, then its fallbacks (and, on a
 * context-length error, its larger-context model). Each model is retried
 * with backoff on retryable errors, every attempt counts against one cap
 * for the whole turn, providers with an open breaker are skipped, and once
 * a part has reached the caller a failure ends the turn with an `error`
 * part instead of splicing another model's output onto it. Each attempt
 * asks for the output its own model has room for (output-room.ts), and a
 * fallback whose window cannot hold the request is skipped too.
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
        const started = performance.now();
        const record = (outcome: ProbeRecord['outcome']) =>
          options.recordProbe?.({
            provider,
            model: probeModel.name,
            outcome,
            latencyMs: Math.round(performance.now() - started),
          });
        try {
          for await (const _part of model.stream(probeRequest, { signal })) {
            // Drain: the probe succeeds when the stream ends without throwing.
          }
        } catch (error) {
          record('failed');
          log.debug({ err: error, provider }, 'the probe of an open circuit failed');
          throw error;
        }
        record('ok');
      },
      onChange: (state, reason) =>
        log[state === 'open' ? 'warn' : 'info'](
          { provider, reason },
          `circuit ${state} for provider`,
        ),
    });
  }

  const kinds = new Map(catalogue.providers.map((provider) => [provider.name, provider.kind]));
  function kindOf(provider: string): ProviderKind {
    const kind = kinds.get(provider);
    if (!kind) throw new Error(`provider "${provider}" is not in the catalogue`);
    return kind;
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
    kindOf,
  };

  /** Streams one turn (turn-stream.ts): the attempts of `Turn`'s chain until one ends. */
  function stream(call: RouterCall): RouterStream {
    return new TurnStream(call, new Turn(call, routing), {
      attemptTimeoutMs: policy.attemptTimeoutMs,
      streamMaxMs: policy.streamMaxMs,
      log,
      recordAttempt: options.recordAttempt,
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
