import type { RecordedRequest } from '../../test/fakes/provider-types.js';

/**
 * The model catalogue that sends a service's model calls to a fake
 * provider: one OpenAI-compatible provider, one model `bench`, priced so
 * the usage ledger's cost path runs too.
 */

/** Catalogue name of the one model. */
export const BENCH_MODEL = 'bench';
/** The environment variable the catalogue reads the (fake) provider key from. */
export const PROVIDER_KEY_ENV = 'BENCH_PROVIDER_KEY';

/**
 * WAYMARK_MODELS for a fake whose OpenAI base URL is `openaiBaseUrl`.
 * `maxOutputTokens` must fit what the fake answers: a provider's answer far
 * past it is cut off (router/attempt.ts), as the fake's is, ignoring it.
 */
export function benchCatalogue(openaiBaseUrl: string, maxOutputTokens = 512): string {
  return JSON.stringify({
    providers: [
      { name: 'fake', kind: 'openai', baseUrl: openaiBaseUrl, apiKeyEnv: PROVIDER_KEY_ENV },
    ],
    models: [
      {
        name: BENCH_MODEL,
        provider: 'fake',
        modelId: 'bench-model',
        contextWindow: 128_000,
        maxOutputTokens,
        pricing: { input: 0.15, output: 0.6, cachedInput: 0.075 },
      },
    ],
    defaultModel: BENCH_MODEL,
  });
}

/** A chat message as a fake provider received it (OpenAI wire format), unchecked. */
export interface OpenAiMessage {
  role?: unknown;
  content?: unknown;
}

/** The messages of a request the fake received; none when its body has no list. */
export function messagesOf(request: RecordedRequest): OpenAiMessage[] {
  const messages: unknown = request.body?.messages;
  return Array.isArray(messages) ? (messages as OpenAiMessage[]) : [];
}
