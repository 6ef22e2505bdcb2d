import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config.js';
import type { Db } from '../store/database.js';
import { anthropicModel, createAnthropicClient } from './anthropic/index.js';
import {
  type Catalogue,
  defaultCatalogue,
  type ModelEntry,
  type ProviderEntry,
} from './catalogue.js';
import { createOpenAiClient, openAiModel } from './openai/index.js';
import { createProviderFetch, type ProviderFetch } from './provider-fetch.js';
import { createModelRouter, type ModelRouter } from './router/router.js';
import { scriptedModel } from './scripted/index.js';
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
 * The one place that reads provider keys and base URLs (from the
 * configuration, or for catalogue providers from the environment variable
 * each one names) and constructs the SDK clients.
 */
export function createLlm(options: {
  config: Config;
  env: NodeJS.ProcessEnv;
  db: Db;
  log: Logger;
}): Llm {
  const { config, log } = options;
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
    recordAttempt: ledger.record,
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

export function resolveCatalogue(config: Config): Catalogue {
  const catalogue =
    config.WAYMARK_MODELS ??
    defaultCatalogue({
      // A base URL alone is a server that needs no key (a local Ollama, vLLM).
      openai: Boolean(config.OPENAI_API_KEY ?? config.OPENAI_BASE_URL),
      anthropic: Boolean(config.ANTHROPIC_API_KEY ?? config.ANTHROPIC_BASE_URL),
    });
  if (!config.WAYMARK_DEFAULT_MODEL) return catalogue;
  if (!catalogue.models.some((model) => model.name === config.WAYMARK_DEFAULT_MODEL)) {
    throw new ConfigError([
      `WAYMARK_DEFAULT_MODEL: "${config.WAYMARK_DEFAULT_MODEL}" is not in the catalogue (${catalogue.models.map((m) => m.name).join(', ')})`,
    ]);
  }
  return { ...catalogue, defaultModel: config.WAYMARK_DEFAULT_MODEL };
}

function adapterFactory(
  provider: ProviderEntry,
  options: { config: Config; env: NodeJS.ProcessEnv; transport: ProviderFetch },
): (entry: ModelEntry) => LanguageModel {
  const { config } = options;
  const common = { provider: provider.name, idleTimeoutMs: config.LLM_IDLE_TIMEOUT_MS };
  switch (provider.kind) {
    case 'scripted':
      return (entry) =>
        scriptedModel({ modelId: entry.modelId, tokenDelayMs: entry.scriptedTokenDelayMs });
    case 'openai': {
      const client = createOpenAiClient({
        apiKey: apiKeyOf(provider, options.env, {
          keyVariable: 'OPENAI_API_KEY',
          key: config.OPENAI_API_KEY,
          baseUrl: config.OPENAI_BASE_URL,
        }),
        baseUrl: provider.baseUrl ?? config.OPENAI_BASE_URL,
        timeoutMs: config.LLM_ATTEMPT_TIMEOUT_MS,
        fetch: options.transport.fetch,
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
        apiKey: apiKeyOf(provider, options.env, {
          keyVariable: 'ANTHROPIC_API_KEY',
          key: config.ANTHROPIC_API_KEY,
          baseUrl: config.ANTHROPIC_BASE_URL,
        }),
        baseUrl: provider.baseUrl ?? config.ANTHROPIC_BASE_URL,
        timeoutMs: config.LLM_ATTEMPT_TIMEOUT_MS,
        fetch: options.transport.fetch,
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

/** What the SDKs are given for a server that needs no key: they refuse an empty one. */
const NO_KEY_NEEDED = 'no-key-needed';

/**
 * A provider's key. A provider naming its variable (`apiKeyEnv`) gets that
 * variable's value, and one unset is a configuration error: borrowing
 * another key would send it where it does not belong. Otherwise the
 * vendor's usual variable, but only for a provider without a `baseUrl` of
 * its own, which calls the vendor (or the vendor's base URL variable set
 * beside that key): an OpenAI key sent to a catalogue's Ollama or
 * OpenRouter entry reaches a server that has no business holding it. A
 * server that needs no key (a local Ollama, vLLM) gets a placeholder.
 */
function apiKeyOf(
  provider: ProviderEntry,
  env: NodeJS.ProcessEnv,
  vendor: { keyVariable: string; key: string | undefined; baseUrl: string | undefined },
): string {
  if (provider.apiKeyEnv) {
    const named = env[provider.apiKeyEnv]?.trim();
    if (named) return named;
    throw new ConfigError([
      `${provider.apiKeyEnv}: not set; provider "${provider.name}" reads its key from it (apiKeyEnv)`,
    ]);
  }
  if (provider.baseUrl) return NO_KEY_NEEDED;
  if (vendor.key) return vendor.key;
  if (vendor.baseUrl) return NO_KEY_NEEDED;
  throw new ConfigError([
    `${vendor.keyVariable}: provider "${provider.name}" needs a key: set ${vendor.keyVariable}, or name its variable in the provider's apiKeyEnv`,
  ]);
}
