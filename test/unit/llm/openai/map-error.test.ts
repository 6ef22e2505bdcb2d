import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { LlmError } from '../../../../src/llm/errors.js';
import { mapError } from '../../../../src/llm/openai/map-error.js';

const context = { provider: 'openai', model: 'gpt-test' };

function httpError(
  status: number,
  error: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  return OpenAI.APIError.generate(status, { error }, undefined, new Headers(headers));
}

describe('mapError', () => {
  it('maps 429 to rate_limited with retry-after in milliseconds', () => {
    const mapped = mapError(
      httpError(429, { message: 'Rate limit reached', type: 'requests' }, { 'retry-after': '2' }),
      context,
    );
    expect(mapped).toBeInstanceOf(LlmError);
    expect(mapped).toMatchObject({
      kind: 'rate_limited',
      provider: 'openai',
      model: 'gpt-test',
      providerStatus: 429,
      retryAfterMs: 2000,
      retryable: true,
    });
    expect(mapped.detail).toContain('Rate limit reached');
  });

  it('prefers retry-after-ms', () => {
    const error = httpError(429, { message: 'slow down' }, { 'retry-after-ms': '150' });
    expect(mapError(error, context).retryAfterMs).toBe(150);
  });

  it.each([
    [401, {}, 'authentication'],
    [403, {}, 'authentication'],
    [400, { code: 'context_length_exceeded', message: 'too long' }, 'context_length_exceeded'],
    [
      400,
      { message: "This model's maximum context length is 8192 tokens." },
      'context_length_exceeded',
    ],
    [400, { code: 'invalid_value', message: 'bad temperature' }, 'invalid_request'],
    [404, { message: 'The model does not exist' }, 'invalid_request'],
    [422, { message: 'unprocessable' }, 'invalid_request'],
    [408, { message: 'request timeout' }, 'timeout'],
    [500, { message: 'boom' }, 'server_error'],
    [502, { message: 'bad gateway' }, 'server_error'],
    [503, { message: 'busy' }, 'overloaded'],
    [529, { message: 'overloaded' }, 'overloaded'],
  ] as const)('maps status %i %j to %s', (status, body, kind) => {
    const mapped = mapError(httpError(status, body), context);
    expect(mapped.kind).toBe(kind);
    expect(mapped.providerStatus).toBe(status);
    expect(mapped.retryAfterMs).toBeUndefined();
  });

  it('maps connection failures and the SDK timeout', () => {
    const refused = new OpenAI.APIConnectionError({ cause: new Error('ECONNREFUSED') });
    expect(mapError(refused, context).kind).toBe('connection');
    expect(mapError(new OpenAI.APIConnectionTimeoutError(), context).kind).toBe('timeout');
  });

  it('maps an error object inside the stream to server_error, or overloaded when it says so', () => {
    const generic = new OpenAI.APIError(
      undefined,
      { message: 'oops', type: 'server_error' },
      undefined,
      undefined,
    );
    expect(mapError(generic, context)).toMatchObject({ kind: 'server_error', detail: 'oops' });
    const overloaded = new OpenAI.APIError(
      undefined,
      { message: 'try later', type: 'overloaded_error' },
      undefined,
      undefined,
    );
    expect(mapError(overloaded, context).kind).toBe('overloaded');
    const saidInMessage = new OpenAI.APIError(
      undefined,
      {
        message: 'The engine is currently overloaded, please try again later.',
        type: 'server_error',
      },
      undefined,
      undefined,
    );
    expect(mapError(saidInMessage, context).kind).toBe('overloaded');
  });

  it('maps a body that broke off mid-stream to stream_interrupted, other unknowns to invalid_request', () => {
    const terminated = new TypeError('terminated');
    expect(mapError(terminated, { ...context, phase: 'stream' }).kind).toBe('stream_interrupted');
    expect(mapError(new Error('bug'), { ...context, phase: 'request' }).kind).toBe(
      'invalid_request',
    );
  });

  it('maps a user abort to cancelled', () => {
    const controller = new AbortController();
    controller.abort();
    const mapped = mapError(new OpenAI.APIUserAbortError(), {
      ...context,
      signal: controller.signal,
    });
    expect(mapped).toMatchObject({ kind: 'cancelled', retryable: false });
    expect(mapError(new OpenAI.APIUserAbortError(), context).kind).toBe('cancelled');
  });

  it('throws the abort reason when it is an LlmError, whatever error the abort caused', () => {
    const reason = new LlmError({ kind: 'timeout', provider: 'openai', model: 'gpt-test' });
    const controller = new AbortController();
    controller.abort(reason);
    const signal = controller.signal;
    expect(mapError(new OpenAI.APIUserAbortError(), { ...context, signal })).toBe(reason);
    expect(mapError(new TypeError('terminated'), { ...context, signal, phase: 'stream' })).toBe(
      reason,
    );
  });

  it('passes an LlmError through', () => {
    const error = new LlmError({ kind: 'overloaded', provider: 'x', model: 'y' });
    expect(mapError(error, context)).toBe(error);
  });
});
