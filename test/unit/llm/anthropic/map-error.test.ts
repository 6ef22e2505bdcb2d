import {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
  AuthenticationError,
  BadRequestError,
  InternalServerError,
  OverloadedError,
  PermissionDeniedError,
  RateLimitError,
} from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { mapError } from '../../../../src/llm/anthropic/map-error.js';
import { LlmError } from '../../../../src/llm/errors.js';

const context = { provider: 'anthropic', model: 'claude-test' };

function body(type: string, message: string) {
  return { type: 'error', error: { type, message } };
}

describe('mapError', () => {
  it('maps 429 to rate_limited with retry-after in milliseconds', () => {
    const error = new RateLimitError(
      429,
      body('rate_limit_error', 'Number of requests has exceeded your rate limit'),
      undefined,
      new Headers({ 'retry-after': '3' }),
    );
    const mapped = mapError(error, context);
    expect(mapped).toBeInstanceOf(LlmError);
    expect(mapped).toMatchObject({
      kind: 'rate_limited',
      provider: 'anthropic',
      model: 'claude-test',
      providerStatus: 429,
      retryAfterMs: 3000,
      retryable: true,
      cause: error,
    });
    expect(mapped.detail).toContain('rate limit');
  });

  it('maps 529 and overloaded_error to overloaded', () => {
    const overloaded = body('overloaded_error', 'Overloaded');
    expect(
      mapError(new OverloadedError(529, overloaded, undefined, new Headers()), context).kind,
    ).toBe('overloaded');
    expect(
      mapError(new InternalServerError(503, overloaded, undefined, new Headers()), context),
    ).toMatchObject({ kind: 'overloaded', providerStatus: 503 });
  });

  it.each([
    [
      new AuthenticationError(
        401,
        body('authentication_error', 'invalid x-api-key'),
        undefined,
        new Headers(),
      ),
      'authentication',
    ],
    [
      new PermissionDeniedError(
        403,
        body('permission_error', 'no access'),
        undefined,
        new Headers(),
      ),
      'authentication',
    ],
    [
      new InternalServerError(
        500,
        body('api_error', 'Internal server error'),
        undefined,
        new Headers(),
      ),
      'server_error',
    ],
    [APIError.generate(502, undefined, 'bad gateway', new Headers()), 'server_error'],
    [
      new BadRequestError(
        400,
        body('invalid_request_error', 'messages: roles must alternate'),
        undefined,
        new Headers(),
      ),
      'invalid_request',
    ],
    [
      APIError.generate(
        404,
        body('not_found_error', 'model: claude-nope'),
        undefined,
        new Headers(),
      ),
      'invalid_request',
    ],
    [
      APIError.generate(408, body('timeout_error', 'Request timed out'), undefined, new Headers()),
      'timeout',
    ],
  ])('maps %s to %s', (error, kind) => {
    expect(mapError(error, context).kind).toBe(kind);
  });

  it('maps a 400 saying the prompt is too long to context_length_exceeded', () => {
    const error = new BadRequestError(
      400,
      body('invalid_request_error', 'prompt is too long: 208310 tokens > 200000 maximum'),
      undefined,
      new Headers(),
    );
    expect(mapError(error, context)).toMatchObject({
      kind: 'context_length_exceeded',
      retryable: false,
      blame: 'user',
    });
  });

  it('maps a 400 saying input plus max_tokens exceed the context limit to context_length_exceeded', () => {
    const message =
      'input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again';
    const error = new BadRequestError(
      400,
      body('invalid_request_error', message),
      undefined,
      new Headers(),
    );
    expect(mapError(error, context)).toMatchObject({
      kind: 'context_length_exceeded',
      retryable: false,
    });
    // The same words in an error event of a 200 stream.
    const event = new APIError(
      undefined,
      body('invalid_request_error', message),
      undefined,
      new Headers(),
    );
    expect(mapError(event, context).kind).toBe('context_length_exceeded');
  });

  it('maps an error event inside a 200 stream by its type', () => {
    const event = (type: string, message: string) =>
      new APIError(undefined, body(type, message), undefined, new Headers());
    expect(mapError(event('overloaded_error', 'Overloaded'), context)).toMatchObject({
      kind: 'overloaded',
      providerStatus: undefined,
    });
    expect(mapError(event('api_error', 'oops'), context).kind).toBe('server_error');
    expect(mapError(event('rate_limit_error', 'slow'), context).kind).toBe('rate_limited');
  });

  it('maps connection failures and timeouts', () => {
    expect(mapError(new APIConnectionTimeoutError(), context).kind).toBe('timeout');
    const refused = new APIConnectionError({ cause: new Error('ECONNREFUSED') });
    expect(mapError(refused, context).kind).toBe('connection');
  });

  it('maps a broken body mid-stream to stream_interrupted, only once streaming', () => {
    const terminated = new TypeError('terminated');
    expect(mapError(terminated, { ...context, phase: 'stream' }).kind).toBe('stream_interrupted');
    expect(mapError(terminated, { ...context, phase: 'request' }).kind).toBe('invalid_request');
  });

  it('on abort returns the signal reason when it is an LlmError', () => {
    const controller = new AbortController();
    const timeout = new LlmError({ kind: 'timeout', provider: 'anthropic', model: 'claude-test' });
    controller.abort(timeout);
    const mapped = mapError(new APIUserAbortError(), { ...context, signal: controller.signal });
    expect(mapped).toBe(timeout);
  });

  it('on any other abort returns cancelled, whatever the SDK threw', () => {
    const controller = new AbortController();
    controller.abort();
    const signal = controller.signal;
    expect(mapError(new APIUserAbortError(), { ...context, signal }).kind).toBe('cancelled');
    expect(mapError(new APIConnectionError({}), { ...context, signal }).kind).toBe('cancelled');
    expect(mapError(new APIUserAbortError(), context).kind).toBe('cancelled');
  });

  it('passes an LlmError through', () => {
    const error = new LlmError({ kind: 'stream_interrupted', provider: 'x', model: 'y' });
    expect(mapError(error, context)).toBe(error);
  });
});
