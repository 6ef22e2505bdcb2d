import Anthropic from '@anthropic-ai/sdk';
import type { Logger } from 'pino';
import { DEFAULT_SDK_LOG_LEVEL, type SdkLogLevel, sdkLogger } from '../sdk-logger.js';

export interface AnthropicClientOptions {
  apiKey: string;
  /** The SDK default (`https://api.anthropic.com`) when omitted; tests point it at the fake server. */
  baseUrl?: string;
  /** SDK timeout up to the response headers; a stalled stream is the idle watchdog's job. */
  timeoutMs: number;
  /** How it reaches the provider: `createProviderFetch().fetch` (provider-fetch.ts). */
  fetch: typeof fetch;
  /** Where the SDK's own lines go (`sdkLog`): never the console, where they would escape the scrub of secrets. */
  log: Logger;
  /** The SDK's level; its default when omitted, never left to the SDK, which would read ANTHROPIC_LOG itself. */
  logLevel?: SdkLogLevel;
}

/**
 * The only place that constructs the Anthropic SDK client. Retries are off:
 * the router is the one retry layer. Requests go through
 * provider-fetch.ts, which refuses redirects; its log lines through
 * the service's logger.
 */
export function createAnthropicClient(options: AnthropicClientOptions): Anthropic {
  return new Anthropic({
    apiKey: options.apiKey,
    baseURL: options.baseUrl,
    maxRetries: 0,
    timeout: options.timeoutMs,
    fetch: options.fetch,
    logger: sdkLogger(options.log),
    logLevel: options.logLevel ?? DEFAULT_SDK_LOG_LEVEL,
  });
}
