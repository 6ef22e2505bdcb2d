import { expect } from 'vitest';

/**
 * Asserts an `inject` response is the problem+json of `status` and `code`,
 * its request id the one in the X-Request-Id header; returns its body.
 */
export function expectProblem(
  response: { statusCode: number; headers: Record<string, unknown>; json(): unknown },
  status: number,
  code: string,
): Record<string, unknown> {
  expect(response.statusCode).toBe(status);
  expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  const body = response.json() as Record<string, unknown>;
  expect(body).toMatchObject({ status, code, type: `urn:waymark:problem:${code}` });
  expect(typeof body.detail).toBe('string');
  expect(body.requestId).toBe(response.headers['x-request-id']);
  return body;
}
