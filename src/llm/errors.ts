import { AppError, type Blame } from '../errors.js';

/**
 * What went wrong with a model call, independent of the vendor. Adapters
 * map their SDK's errors to these kinds; the router decides on kinds only.
 */
export type LlmErrorKind =
  | 'rate_limited'
  | 'overloaded'
  | 'server_error'
  | 'timeout'
  | 'connection'
  | 'stream_interrupted'
  | 'invalid_request'
  | 'context_length_exceeded'
  | 'authentication'
  | 'content_filtered'
  | 'cancelled'
  | 'unavailable';

interface KindTraits {
  retryable: boolean;
  /** Status of the problem answered when such an error reaches HTTP. */
  status: number;
  blame: Blame;
  userMessage: string;
}

const TRAITS: Record<LlmErrorKind, KindTraits> = {
  rate_limited: {
    retryable: true,
    status: 503,
    blame: 'provider',
    userMessage: 'The model provider is rate limiting requests',
  },
  overloaded: {
    retryable: true,
    status: 503,
    blame: 'provider',
    userMessage: 'The model provider is overloaded',
  },
  server_error: {
    retryable: true,
    status: 502,
    blame: 'provider',
    userMessage: 'The model provider failed',
  },
  timeout: {
    retryable: true,
    status: 504,
    blame: 'provider',
    userMessage: 'The model provider did not answer in time',
  },
  connection: {
    retryable: true,
    status: 502,
    blame: 'provider',
    userMessage: 'The model provider could not be reached',
  },
  stream_interrupted: {
    retryable: true,
    status: 502,
    blame: 'provider',
    userMessage: 'The model’s answer was cut off',
  },
  invalid_request: {
    retryable: false,
    status: 400,
    blame: 'system',
    userMessage: 'The model provider rejected the request',
  },
  context_length_exceeded: {
    retryable: false,
    status: 400,
    blame: 'user',
    userMessage: 'The conversation is too long for the model',
  },
  authentication: {
    retryable: false,
    status: 502,
    blame: 'configuration',
    userMessage: 'The model provider rejected our credentials',
  },
  content_filtered: {
    retryable: false,
    status: 422,
    blame: 'user',
    userMessage: 'The model provider refused the content',
  },
  cancelled: {
    retryable: false,
    status: 499,
    blame: 'user',
    userMessage: 'The model call was cancelled',
  },
  unavailable: {
    retryable: false,
    status: 503,
    blame: 'provider',
    userMessage: 'No model provider is available',
  },
};

export interface LlmErrorOptions {
  kind: LlmErrorKind;
  provider: string;
  model: string;
  /** The vendor's HTTP status, when there was one. */
  providerStatus?: number;
  /** From `retry-after-ms` / `retry-after`, when the provider sent it. */
  retryAfterMs?: number;
  /** Vendor message, for logs only: never shown to end users. */
  detail?: string;
  cause?: unknown;
}

export class LlmError extends AppError {
  readonly kind: LlmErrorKind;
  readonly provider: string;
  readonly model: string;
  readonly providerStatus: number | undefined;
  readonly retryAfterMs: number | undefined;
  readonly detail: string | undefined;

  constructor(options: LlmErrorOptions) {
    const traits = TRAITS[options.kind];
    super({
      code: `llm_${options.kind}`,
      status: traits.status,
      userMessage: traits.userMessage,
      blame: traits.blame,
      retryable: traits.retryable,
      cause: options.cause,
    });
    this.name = 'LlmError';
    this.kind = options.kind;
    this.provider = options.provider;
    this.model = options.model;
    this.providerStatus = options.providerStatus;
    this.retryAfterMs = options.retryAfterMs;
    this.detail = options.detail;
    if (options.detail)
      this.message = `${traits.userMessage} (${options.provider}/${options.model}: ${options.detail})`;
  }
}

/** Reads `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date). */
export function retryAfterMs(
  headers: Headers | Record<string, string | undefined> | undefined,
  now = Date.now(),
): number | undefined {
  if (!headers) return undefined;
  const get = (name: string) =>
    headers instanceof Headers ? (headers.get(name) ?? undefined) : headers[name];
  const ms = Number(get('retry-after-ms'));
  if (get('retry-after-ms') !== undefined && Number.isFinite(ms) && ms >= 0) return ms;
  const value = get('retry-after');
  if (value === undefined) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * The error of an aborted call, for every adapter: the signal's reason when
 * it is an `LlmError` (the idle watchdog's timeout, a router deadline), else
 * `cancelled`.
 */
export function abortedError(
  signal: AbortSignal,
  context: { provider: string; model: string },
  cause?: unknown,
): LlmError {
  if (signal.reason instanceof LlmError) return signal.reason;
  return new LlmError({
    kind: 'cancelled',
    provider: context.provider,
    model: context.model,
    detail: 'the call was aborted',
    cause: cause ?? signal.reason,
  });
}
