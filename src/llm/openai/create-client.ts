import OpenAI from 'openai';
import { PROVIDER_FETCH_OPTIONS } from '../provider-fetch.js';

export interface OpenAiClientOptions {
  apiKey: string;
  /** Any OpenAI-compatible endpoint (Ollama, vLLM, OpenRouter...); the SDK default when omitted. */
  baseUrl?: string;
  /** SDK timeout up to the response headers; a stalled stream is the idle watchdog's job. */
  timeoutMs: number;
}

/**
 * The only place that constructs the OpenAI SDK client. Retries are off:
 * the router is the one retry layer. Redirects are refused (see
 * provider-fetch.ts).
 */
export function createOpenAiClient(options: OpenAiClientOptions): OpenAI {
  return new OpenAI({
    apiKey: options.apiKey,
    baseURL: options.baseUrl,
    maxRetries: 0,
    timeout: options.timeoutMs,
    fetchOptions: PROVIDER_FETCH_OPTIONS,
  });
}
