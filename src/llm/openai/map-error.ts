import OpenAI from 'openai';
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

/** Maps anything the SDK (or fetch under it) throws to an `LlmError`. */
export function mapError(error: unknown, context: ErrorContext): LlmError {
  if (error instanceof LlmError) return error;
  if (context.signal?.aborted) return abortedError(context.signal, context, error);
  const base = { provider: context.provider, model: context.model, cause: error };
  const detail = error instanceof Error ? error.message : String(error);
  if (error instanceof OpenAI.APIUserAbortError)
    return new LlmError({ ...base, kind: 'cancelled', detail });
  if (error instanceof OpenAI.APIConnectionTimeoutError)
    return new LlmError({ ...base, kind: 'timeout', detail });
  if (isRefusedRedirect(error))
    return new LlmError({ ...base, kind: 'invalid_request', detail: REFUSED_REDIRECT_DETAIL });
  if (error instanceof OpenAI.APIConnectionError)
    return new LlmError({ ...base, kind: 'connection', detail });
  if (error instanceof OpenAI.APIError) {
    // No status: an error object the server sent inside the event stream.
    if (error.status === undefined)
      return new LlmError({ ...base, kind: streamErrorKind(error), detail });
    return new LlmError({
      ...base,
      kind: statusKind(error),
      providerStatus: error.status,
      retryAfterMs: error.status === 429 ? retryAfterMs(error.headers) : undefined,
      detail,
    });
  }
  // fetch's body reader failing (socket closed, "terminated") or an unparsable chunk.
  if (context.phase === 'stream')
    return new LlmError({ ...base, kind: 'stream_interrupted', detail });
  // The SDK wraps every network failure of the request; anything else is a bug on our side.
  return new LlmError({ ...base, kind: 'invalid_request', detail });
}

function statusKind(error: InstanceType<typeof OpenAI.APIError>): LlmErrorKind {
  const status = error.status ?? 0;
  if (status === 429) return 'rate_limited';
  if (status === 401 || status === 403) return 'authentication';
  if (status === 408) return 'timeout';
  if (status === 400 && isContextLength(error)) return 'context_length_exceeded';
  if (status === 503 || status === 529) return 'overloaded';
  if (status >= 500) return 'server_error';
  return 'invalid_request';
}

function isContextLength(error: InstanceType<typeof OpenAI.APIError>): boolean {
  return (
    error.code === 'context_length_exceeded' ||
    /maximum context length|context length|context window/i.test(error.message)
  );
}

/** OpenAI reports overload as type `server_error` with "overloaded" only in the message. */
function streamErrorKind(error: InstanceType<typeof OpenAI.APIError>): LlmErrorKind {
  const said = `${error.type ?? ''} ${error.code ?? ''} ${error.message}`;
  return /overloaded/i.test(said) ? 'overloaded' : 'server_error';
}
