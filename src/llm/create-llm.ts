import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config.js';
import type { Db } from '../store/database.js';
import { anthropicModel, createAnthropicClient } from './anthropic/index.js';
import type { Catalogue, ModelEntry, ProviderEntry } from './catalogue.js';
import { modelSettingProblems, providerKeyOf, resolveCatalogue } from './model-settings.js';
import { createOpenAiClient, openAiModel } from './openai/index.js';
import { createProviderFetch, type ProviderFetch } from './provider-fetch.js';
import { createModelRouter, type ModelRouter, type ProbeRecord } from './router/router.js';
import type { AttemptRecord } from './router/types.js';
import { scriptedModel } from './scripted/index.js';
import { sdkLog } from './sdk-logger.js';
import type { LanguageModel } from './types.js';
import { createUsageLedger, type UsageLedger } from './usage-ledger.js';

/** The model stack of one process: catalogue, adapters, router and usage ledger. */
export interface Llm {
  catalogue: Catalogue;
  router: ModelRouter;
  ledger: UsageLedger;
  /** Flushes the ledger, stops the breakers' probes and closes the idle provider connections. */
  close(): Promise<void>;
}

/**
 * The one place that constructs the SDK clients, with each provider's base
 * URL and key (from the configuration, or from the environment variable a
 * catalogue provider names: `providerKeyOf`) and their logger and level
 * (OPENAI_LOG, ANTHROPIC_LOG: `sdkLog`).
 */
export function createLlm(options: {
  config: Config;
  env: NodeJS.ProcessEnv;
  db: Db;
  log: Logger;
  /** Each model call attempt, as the usage ledger records it (the metrics count them). */
  onAttempt?: (attempt: AttemptRecord) => void;
  /** Each probe of a provider whose breaker is open (the metrics count them). */
  onProbe?: (probe: ProbeRecord) => void;
}): Llm {
  const { config, log } = options;
  // loadConfig has run these checks; a config or env from elsewhere (a test's) gets them too.
  const problems = modelSettingProblems(config, options.env);
  if (problems.length > 0) throw new ConfigError(problems);
  const catalogue = resolveCatalogue(config);
  const transport = createProviderFetch();
  const clientsByProvider = new Map(
    catalogue.providers.map((provider) => [
      provider.name,
      adapterFactory(provider, { ...options, transport }),
    ]),
  );
  const languageModels = new Map<string, LanguageModel>();
  for (const entry of catalogue.models) {
    const factory = clientsByProvider.get(entry.provider);
    if (factory) languageModels.set(entry.name, factory(entry));
  }
  const ledger = createUsageLedger({ db: options.db, log });
  const router = createModelRouter({
    catalogue,
    languageModels,
    log: log.child({ component: 'model-router' }),
    recordAttempt: (attempt) => {
      ledger.record(attempt);
      options.onAttempt?.(attempt);
    },
    recordProbe: options.onProbe,
    policy: {
      maxTotalAttempts: config.LLM_MAX_TOTAL_ATTEMPTS,
      maxRetriesPerModel: config.LLM_MAX_RETRIES_PER_MODEL,
      backoffBaseMs: config.LLM_BACKOFF_BASE_MS,
      backoffMaxMs: config.LLM_BACKOFF_MAX_MS,
      maxRetryAfterMs: config.LLM_MAX_RETRY_AFTER_MS,
      attemptTimeoutMs: config.LLM_ATTEMPT_TIMEOUT_MS,
      streamMaxMs: config.LLM_STREAM_MAX_MS,
      breakerFailureThreshold: config.LLM_BREAKER_THRESHOLD,
      breakerProbeIntervalMs: config.LLM_BREAKER_PROBE_MS,
    },
  });
  if (catalogue.providers.some((provider) => provider.kind === 'scripted')) {
    log.warn('no provider key or base URL is set: answers come from the offline scripted model');
  }
  return {
    catalogue,
    router,
    ledger,
    async close() {
      router.dispose();
      await ledger.close();
      transport.close();
    },
  };
}

function adapterFactory(
  provider: ProviderEntry,
  options: { config: Config; env: NodeJS.ProcessEnv; log: Logger; transport: ProviderFetch },
): (entry: ModelEntry) => LanguageModel {
  const { config, log } = options;
  const common = { provider: provider.name, idleTimeoutMs: config.LLM_IDLE_TIMEOUT_MS };
  switch (provider.kind) {
    case 'scripted':
      return (entry) =>
        scriptedModel({ modelId: entry.modelId, tokenDelayMs: entry.scriptedTokenDelayMs });
    case 'openai': {
      const client = createOpenAiClient({
        apiKey: apiKeyOf(provider, options),
        baseUrl: provider.baseUrl ?? config.OPENAI_BASE_URL,
        timeoutMs: config.LLM_ATTEMPT_TIMEOUT_MS,
        fetch: options.transport.fetch,
        log: sdkLog(log, {
          component: 'openai-sdk',
          provider: provider.name,
          level: config.OPENAI_LOG,
        }),
        logLevel: config.OPENAI_LOG,
      });
      return (entry) =>
        openAiModel({
          ...common,
          client,
          modelId: entry.modelId,
          maxOutputTokens: entry.maxOutputTokens,
        });
    }
    case 'anthropic': {
      const client = createAnthropicClient({
        apiKey: apiKeyOf(provider, options),
        baseUrl: provider.baseUrl ?? config.ANTHROPIC_BASE_URL,
        timeoutMs: config.LLM_ATTEMPT_TIMEOUT_MS,
        fetch: options.transport.fetch,
        log: sdkLog(log, {
          component: 'anthropic-sdk',
          provider: provider.name,
          level: config.ANTHROPIC_LOG,
        }),
        logLevel: config.ANTHROPIC_LOG,
      });
      return (entry) =>
        anthropicModel({
          ...common,
          client,
          modelId: entry.modelId,
          maxOutputTokens: entry.maxOutputTokens,
        });
    }
  }
}

/** The provider's key; `modelSettingProblems`, checked first, found none missing. */
function apiKeyOf(
  provider: ProviderEntry,
  options: { config: Config; env: NodeJS.ProcessEnv },
): string {
  const found = providerKeyOf(provider, { settings: options.config, env: options.env });
  if ('problem' in found) throw new ConfigError([found.problem]);
  return found.key;
}
