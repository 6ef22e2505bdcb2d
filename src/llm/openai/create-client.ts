import OpenAI from 'openai';

export interface OpenAiClientOptions {
  apiKey: string;
  /** Any OpenAI-compatible endpoint (Ollama, vLLM, OpenRouter...); the SDK default when omitted. */
  baseUrl?: string;
  /** SDK timeout up to the response headers; a stalled stream is the idle watchdog's job. */
  timeoutMs: number;
  /** How it reaches the provider: `createProviderFetch().fetch` (provider-fetch.ts). */
  fetch: typeof fetch;
}

/**
 * The only place that constructs the OpenAI SDK client. Retries are off:
 * the router is the one retry layer. Requests go through
 * provider-fetch.ts, which refuses redirects.
 */
export function createOpenAiClient(options: OpenAiClientOptions): OpenAI {
  return new OpenAI({
    apiKey: options.apiKey,
    baseURL: options.baseUrl,
    maxRetries: 0,
    timeout: options.timeoutMs,
    fetch: options.fetch,
  });
}
