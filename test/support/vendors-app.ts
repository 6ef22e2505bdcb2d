import { afterAll, beforeAll } from 'vitest';
import type { ModelEntry } from '../../src/llm/catalogue.js';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { startTestApp, type TestApp } from './app.js';
import { bootstrapOperator, createTenant, type TestTenant } from './workflows.js';

/**
 * An app whose catalogue points at the fake provider server: provider `oai`
 * on its OpenAI API, `ant` on its Anthropic one, for tests that go through
 * the real vendor SDKs.
 */

/**
 * A catalogue model on the fake: its vendor id is `<name>-id`; 32,000
 * tokens of window, 256 of output and free unless given.
 */
export type VendorModel = Pick<ModelEntry, 'name'> & {
  provider: 'oai' | 'ant';
} & Partial<
    Pick<
      ModelEntry,
      'contextWindow' | 'maxOutputTokens' | 'pricing' | 'fallbacks' | 'largerContext'
    >
  >;

export interface VendorCatalogueOptions {
  models: VendorModel[];
  defaultModel: string;
}

/** The WAYMARK_MODELS of `models` on the fake `provider`. */
export function vendorCatalogue(
  provider: FakeProviderServer,
  { models, defaultModel }: VendorCatalogueOptions,
): string {
  return JSON.stringify({
    providers: [
      { name: 'oai', kind: 'openai', baseUrl: provider.openaiBaseUrl },
      { name: 'ant', kind: 'anthropic', baseUrl: provider.anthropicBaseUrl },
    ],
    models: models.map((model) => ({
      ...model,
      modelId: `${model.name}-id`,
      contextWindow: model.contextWindow ?? 32_000,
      maxOutputTokens: model.maxOutputTokens ?? 256,
    })),
    defaultModel,
  });
}

export interface VendorsAppOptions extends VendorCatalogueOptions {
  /** The tenant's name; `vendors` unless given. */
  tenantName?: string;
  /** More settings of the app; no retries of a model and no rate limit to speak of unless given. */
  env?: Record<string, string>;
}

/**
 * The test file's fake provider and app on it, with a tenant: started
 * before the file's tests (beforeAll) and closed after them (afterAll).
 * `provider()`, `app()` and `tenant()` are the running ones.
 */
export function useVendorsApp(options: VendorsAppOptions) {
  let provider: FakeProviderServer | undefined;
  let testApp: TestApp | undefined;
  let tenant: TestTenant | undefined;
  beforeAll(async () => {
    provider = await startFakeProviderServer();
    testApp = await startTestApp({
      WAYMARK_MODELS: vendorCatalogue(provider, options),
      LLM_MAX_RETRIES_PER_MODEL: '0',
      RATE_LIMIT_MAX: '100000',
      ...options.env,
    });
    tenant = await createTenant(testApp, await bootstrapOperator(testApp), {
      name: options.tenantName ?? 'vendors',
    });
  });
  afterAll(async () => {
    await testApp?.close();
    await provider?.close();
  });

  function started<T>(value: T | undefined): T {
    if (value === undefined) throw new Error('the vendors app starts in beforeAll');
    return value;
  }
  return {
    provider: () => started(provider),
    app: () => started(testApp),
    tenant: () => started(tenant),
  };
}
