import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { AppError, toAppError } from '../../src/errors.js';
import { problemSchema, toProblem } from '../../src/http/problem.js';

const request = { url: '/v1/api-keys?token=secret', id: 'req-1' } as FastifyRequest;

describe('toProblem', () => {
  it('renders an AppError as RFC 9457 problem details with a stable code', () => {
    const problem = toProblem(
      new AppError({
        code: 'validation_failed',
        status: 400,
        userMessage: 'The request body is invalid',
        blame: 'user',
        fields: [{ field: 'body.name', message: 'Required' }],
      }),
      request,
    );
    expect(problemSchema.parse(problem)).toEqual({
      type: 'urn:waymark:problem:validation_failed',
      title: 'Bad Request',
      status: 400,
      detail: 'The request body is invalid',
      instance: '/v1/api-keys',
      code: 'validation_failed',
      requestId: 'req-1',
      errors: [{ field: 'body.name', message: 'Required' }],
    });
  });

  it('hides the details of system errors', () => {
    const problem = toProblem(toAppError(new Error('connection to 10.0.0.5 refused')), request);
    expect(problem.status).toBe(500);
    expect(problem.code).toBe('internal_error');
    expect(JSON.stringify(problem)).not.toContain('10.0.0.5');
  });

  it('keeps the query string (which may carry tokens) out of instance', () => {
    expect(toProblem(toAppError(new Error('x')), request).instance).toBe('/v1/api-keys');
  });
});
