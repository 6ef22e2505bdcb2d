import { z } from 'zod';

/**
 * The model catalogue: every model the service may call, by name. Names are
 * what requests, sessions and tenants refer to; the vendor's model id is
 * an implementation detail of the entry.
 */

const price = z.number().nonnegative();

/**
 * An object of the catalogue whose unknown keys are errors: a misspelt
 * optional field would otherwise be as if absent, `baseURL` for `baseUrl`
 * sending a local model's prompts to the vendor, `fallback` for `fallbacks`
 * dropping the fallback chain, and nothing said at start.
 */
function strictObject<Shape extends z.ZodRawShape>(shape: Shape) {
  const known = Object.keys(shape).join(', ');
  return z.strictObject(shape, {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown ${issue.keys.length === 1 ? 'key' : 'keys'} ${issue.keys.map((key) => `"${key}"`).join(', ')} (known: ${known})`
        : undefined,
  });
}

export const modelEntrySchema = strictObject({
  /** Catalogue name, e.g. `gpt-4o-mini` or `local-llama`. */
  name: z.string().min(1),
  /** Name of a configured provider. */
  provider: z.string().min(1),
  /** The vendor's model id. */
  modelId: z.string().min(1),
  contextWindow: z.number().int().positive(),
  maxOutputTokens: z.number().int().positive(),
  /** US dollars per million tokens. */
  pricing: strictObject({
    input: price,
    output: price,
    cachedInput: price,
    /** Anthropic bills cache writes above the input price; defaults to the input price. */
    cacheWrite: price.optional(),
  }).default({ input: 0, output: 0, cachedInput: 0 }),
  /** Catalogue names tried, in order, when this model fails retryably. */
  fallbacks: z.array(z.string().min(1)).default([]),
  /** Catalogue name with a larger context window, used on a context-length error. */
  largerContext: z.string().min(1).optional(),
  /** Scripted models only: pause between streamed tokens, to make progress visible in demos and tests. */
  scriptedTokenDelayMs: z.number().int().min(0).max(60_000).optional(),
});

export type ModelEntry = z.infer<typeof modelEntrySchema>;

export const providerKinds = ['openai', 'anthropic', 'scripted'] as const;
export type ProviderKind = (typeof providerKinds)[number];

export const providerEntrySchema = strictObject({
  name: z.string().min(1),
  kind: z.enum(providerKinds),
  /** Read from the environment variable named here, never written in the catalogue itself. */
  apiKeyEnv: z.string().min(1).optional(),
  baseUrl: z.url().optional(),
});

export type ProviderEntry = z.infer<typeof providerEntrySchema>;

export const catalogueSchema = strictObject({
  providers: z.array(providerEntrySchema).min(1),
  models: z.array(modelEntrySchema).min(1),
  defaultModel: z.string().min(1),
}).superRefine((catalogue, context) => {
  const providers = new Set(catalogue.providers.map((p) => p.name));
  const models = new Set(catalogue.models.map((m) => m.name));
  if (providers.size !== catalogue.providers.length) {
    context.addIssue({
      code: 'custom',
      message: 'provider names must be unique',
      path: ['providers'],
    });
  }
  if (models.size !== catalogue.models.length) {
    context.addIssue({ code: 'custom', message: 'model names must be unique', path: ['models'] });
  }
  catalogue.models.forEach((model, index) => {
    if (!providers.has(model.provider)) {
      context.addIssue({
        code: 'custom',
        message: `unknown provider "${model.provider}"`,
        path: ['models', index, 'provider'],
      });
    }
    for (const name of [
      ...model.fallbacks,
      ...(model.largerContext ? [model.largerContext] : []),
    ]) {
      if (!models.has(name)) {
        context.addIssue({
          code: 'custom',
          message: `unknown model "${name}"`,
          path: ['models', index],
        });
      }
    }
  });
  if (!models.has(catalogue.defaultModel)) {
    context.addIssue({
      code: 'custom',
      message: `unknown model "${catalogue.defaultModel}"`,
      path: ['defaultModel'],
    });
  }
});

export type Catalogue = z.infer<typeof catalogueSchema>;

/** Cost of one attempt in US dollars. */
export function costOf(
  entry: ModelEntry,
  usage: {
    inputTokens: number;
    outputTokens: number;
    cachedInputTokens: number;
    cacheWriteTokens: number;
  },
): number {
  const { pricing } = entry;
  const uncached = Math.max(
    0,
    usage.inputTokens - usage.cachedInputTokens - usage.cacheWriteTokens,
  );
  const dollars =
    uncached * pricing.input +
    usage.cachedInputTokens * pricing.cachedInput +
    usage.cacheWriteTokens * (pricing.cacheWrite ?? pricing.input) +
    usage.outputTokens * pricing.output;
  return dollars / 1_000_000;
}

export const SCRIPTED_MODEL_NAME = 'scripted';

/**
 * The catalogue used when WAYMARK_MODELS is not set: the vendors whose key
 * or base URL variables are set (their providers, without a baseUrl of
 * their own, take those variables), each with a small and a large model,
 * chained so that each falls back to the other vendor; the offline
 * scripted model when none is set. Prices are list prices per million tokens at the time of writing;
 * set WAYMARK_MODELS to keep them current.
 */
export function defaultCatalogue(keys: { openai: boolean; anthropic: boolean }): Catalogue {
  const providers: ProviderEntry[] = [];
  const models: ModelEntry[] = [];
  if (keys.openai) {
    providers.push({ name: 'openai', kind: 'openai' });
    models.push(
      entry('gpt-4o-mini', 'openai', 128_000, 16_384, {
        input: 0.15,
        output: 0.6,
        cachedInput: 0.075,
      }),
      entry('gpt-4o', 'openai', 128_000, 16_384, { input: 2.5, output: 10, cachedInput: 1.25 }),
    );
  }
  if (keys.anthropic) {
    providers.push({ name: 'anthropic', kind: 'anthropic' });
    models.push(
      entry('claude-haiku-4-5', 'anthropic', 200_000, 64_000, {
        input: 1,
        output: 5,
        cachedInput: 0.1,
        cacheWrite: 1.25,
      }),
      entry('claude-sonnet-4-5', 'anthropic', 200_000, 64_000, {
        input: 3,
        output: 15,
        cachedInput: 0.3,
        cacheWrite: 3.75,
      }),
    );
  }
  if (keys.openai && keys.anthropic) {
    chain(models, 'gpt-4o-mini', ['claude-haiku-4-5']);
    chain(models, 'gpt-4o', ['claude-sonnet-4-5']);
    chain(models, 'claude-haiku-4-5', ['gpt-4o-mini']);
    chain(models, 'claude-sonnet-4-5', ['gpt-4o']);
  }
  if (models.length === 0) {
    providers.push({ name: 'scripted', kind: 'scripted' });
    models.push(
      entry(SCRIPTED_MODEL_NAME, 'scripted', 128_000, 4_096, {
        input: 0,
        output: 0,
        cachedInput: 0,
      }),
    );
  }
  const first = models[0];
  if (!first) throw new Error('the default catalogue has no model');
  return { providers, models, defaultModel: first.name };
}

function entry(
  name: string,
  provider: string,
  contextWindow: number,
  maxOutputTokens: number,
  pricing: ModelEntry['pricing'],
): ModelEntry {
  return { name, provider, modelId: name, contextWindow, maxOutputTokens, pricing, fallbacks: [] };
}

function chain(models: ModelEntry[], name: string, fallbacks: string[]): void {
  const model = models.find((m) => m.name === name);
  if (model) model.fallbacks = fallbacks;
}
