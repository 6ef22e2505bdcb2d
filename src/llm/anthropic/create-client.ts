import Anthropic from '@anthropic-ai/sdk';
import { PROVIDER_FETCH_OPTIONS } from '../provider-fetch.js';

export interface AnthropicClientOptions {
  apiKey: string;
  /** The SDK default (`https://api.anthropic.com`) when omitted; tests point it at the fake server. */
  baseUrl?: string;
  /** SDK timeout up to the response headers; a stalled stream is the idle watchdog's job. */
  timeoutMs: number;
}

/**
 * The only place that constructs the Anthropic SDK client. Retries are off:
 * the router is the one retry layer. Redirects are refused (see
 * provider-fetch.ts).
 */
export function createAnthropicClient(options: AnthropicClientOptions): Anthropic {
  return new Anthropic({
    apiKey: options.apiKey,
    baseURL: options.baseUrl,
    maxRetries: 0,
    timeout: options.timeoutMs,
    fetchOptions: PROVIDER_FETCH_OPTIONS,
  });
}
