import Anthropic from '@anthropic-ai/sdk';
import { abortedError, LlmError, type LlmErrorKind, retryAfterMs } from '../errors.js';
import { isRefusedRedirect, REFUSED_REDIRECT_DETAIL } from '../provider-fetch.js';

export interface ErrorContext {
  provider: string;
  model: string;
  /** The signal of the call: an abort wins over whatever error the abort caused. */
  signal?: AbortSignal;
  /** `stream` once the response has started; a non-SDK error then means the body broke off. */
  phase?: 'request' | 'stream';
}

type ApiError = InstanceType<typeof Anthropic.APIError>;

/** Maps anything the SDK (or fetch under it) throws to an `LlmError`. */
export function mapError(error: unknown, context: ErrorContext): LlmError {
  if (error instanceof LlmError) return error;
  if (context.signal?.aborted) return abortedError(context.signal, context, error);
  const base = { provider: context.provider, model: context.model, cause: error };
  const detail = error instanceof Error ? error.message : String(error);
  if (error instanceof Anthropic.APIUserAbortError)
    return new LlmError({ ...base, kind: 'cancelled', detail });
  if (error instanceof Anthropic.APIConnectionTimeoutError)
    return new LlmError({ ...base, kind: 'timeout', detail });
  if (isRefusedRedirect(error))
    return new LlmError({ ...base, kind: 'invalid_request', detail: REFUSED_REDIRECT_DETAIL });
  if (error instanceof Anthropic.APIConnectionError)
    return new LlmError({ ...base, kind: 'connection', detail });
  if (error instanceof Anthropic.APIError) {
    return new LlmError({
      ...base,
      // No status: an `error` event the server sent inside a 200 event stream.
      kind: error.status === undefined ? typeKind(error) : statusKind(error, error.status),
      providerStatus: error.status,
      retryAfterMs: retryAfterMs(error.headers),
      detail,
    });
  }
  // fetch's body reader failing (socket closed, "terminated") or an unparsable event.
  if (context.phase === 'stream')
    return new LlmError({ ...base, kind: 'stream_interrupted', detail });
  // The SDK wraps every network failure of the request; anything else (its own
  // checks of the options, a bug on our side) is a request that cannot work.
  return new LlmError({ ...base, kind: 'invalid_request', detail });
}

function statusKind(error: ApiError, status: number): LlmErrorKind {
  if (status === 429) return 'rate_limited';
  if (status === 529 || error.type === 'overloaded_error') return 'overloaded';
  if (status === 401 || status === 403) return 'authentication';
  // `billing_error`: the account, not the request, has to change.
  if (status === 402) return 'authentication';
  if (status === 408 || error.type === 'timeout_error') return 'timeout';
  if (status === 400 && isPromptTooLong(error)) return 'context_length_exceeded';
  if (status >= 500) return 'server_error';
  return 'invalid_request';
}

/** An error event in the stream has a type but no status. */
function typeKind(error: ApiError): LlmErrorKind {
  switch (error.type) {
    case 'overloaded_error':
      return 'overloaded';
    case 'rate_limit_error':
      return 'rate_limited';
    case 'timeout_error':
      return 'timeout';
    case 'authentication_error':
    case 'permission_error':
    case 'billing_error':
      return 'authentication';
    case 'invalid_request_error':
      return isPromptTooLong(error) ? 'context_length_exceeded' : 'invalid_request';
    default:
      // `api_error` and anything unknown: the provider failed mid-answer.
      return 'server_error';
  }
}

/**
 * Anthropic says "prompt is too long: 208310 tokens > 200000 maximum" when
 * the prompt alone does not fit, and "input length and `max_tokens` exceed
 * context limit: 178959 + 64000 > 200000, ..." when it fits but leaves no
 * room for `max_tokens`. The router asks for no more output than the
 * estimated input leaves room for in the window (output-room.ts), so the
 * second comes only when the estimate fell short or the room was under the
 * floor asked for anyway. Both are cured by a
 * shorter prompt, so both are context-length errors the loop condenses for.
 */
function isPromptTooLong(error: ApiError): boolean {
  if (error.type !== null && error.type !== 'invalid_request_error') return false;
  const message = error.apiMessage ?? error.message;
  return /prompt is too long|too many (input )?tokens|context (window|length)|exceeds? (the )?context limit/i.test(
    message,
  );
}
