import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { AppError } from '../errors.js';

/** RFC 9457 problem details, the body of every error response. */
export const problemSchema = z
  .object({
    type: z.string().describe('URI naming the problem type: urn:waymark:problem:<code>'),
    title: z.string().describe('HTTP reason phrase of the status'),
    status: z.number().int(),
    detail: z.string().describe('What went wrong, for a person'),
    instance: z.string().describe('Path of the request that failed'),
    code: z.string().describe('Stable machine-readable code'),
    requestId: z.string(),
    errors: z
      .array(z.object({ field: z.string(), message: z.string() }))
      .optional()
      .describe('Each failing field, for validation errors'),
    current: z
      .record(z.string(), z.unknown())
      .optional()
      .describe(
        'For conflicts: the current state that refused the request, e.g. a workflow’s status, awaitingReason and version',
      ),
  })
  .meta({ id: 'Problem' });

export type Problem = z.infer<typeof problemSchema>;

export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/**
 * An error's cause never leaves the process, only its `userMessage`, written
 * for users; a 500's (a bug, an unknown throw) says no more than that, and
 * the request id ties the answer to the logged cause. A 503's says why
 * (the database is unavailable, the replica shuts down): not a bug, and the
 * client should retry rather than report one.
 */
export function toProblem(error: AppError, request: Pick<FastifyRequest, 'url' | 'id'>): Problem {
  const detail = error.status === 500 ? 'An internal error occurred' : error.userMessage;
  return {
    type: `urn:waymark:problem:${error.code}`,
    title: STATUS_CODES[error.status] ?? 'Error',
    status: error.status,
    detail,
    instance: request.url.split('?')[0] ?? '/',
    code: error.code,
    requestId: request.id,
    ...(error.fields && error.fields.length > 0 ? { errors: error.fields } : {}),
    ...(error.current ? { current: error.current } : {}),
  };
}

export function sendProblem(
  reply: FastifyReply,
  request: FastifyRequest,
  error: AppError,
): FastifyReply {
  return reply
    .code(error.status)
    .headers(error.headers)
    .type(PROBLEM_CONTENT_TYPE)
    .serializer(JSON.stringify)
    .send(toProblem(error, request));
}

/** The response schemas of the errors a route can answer, for the OpenAPI document. */
export function problemResponses<const S extends readonly number[]>(...statuses: S) {
  return Object.fromEntries(statuses.map((status) => [status, problemSchema])) as Record<
    S[number],
    typeof problemSchema
  >;
}
