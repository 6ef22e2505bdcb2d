import Anthropic from '@anthropic-ai/sdk';

export interface AnthropicClientOptions {
  apiKey: string;
  /** The SDK default (`https://api.anthropic.com`) when omitted; tests point it at the fake server. */
  baseUrl?: string;
  /** SDK timeout up to the response headers; a stalled stream is the idle watchdog's job. */
  timeoutMs: number;
  /** How it reaches the provider: `createProviderFetch().fetch` (provider-fetch.ts). */
  fetch: typeof fetch;
}

/**
 * The only place that constructs the Anthropic SDK client. Retries are off:
 * the router is the one retry layer. Requests go through
 * provider-fetch.ts, which refuses redirects.
 */
export function createAnthropicClient(options: AnthropicClientOptions): Anthropic {
  return new Anthropic({
    apiKey: options.apiKey,
    baseURL: options.baseUrl,
    maxRetries: 0,
    timeout: options.timeoutMs,
    fetch: options.fetch,
  });
}
