import { randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { openApiProblems } from '../support/openapi-check.js';
import { pipelineRequests, planReply, stage } from '../support/pipeline-http.js';
import { answer, useToolLoopHarness } from '../support/tool-loop-harness.js';
import { startWorkflow, waitForStatus } from '../support/workflows.js';

/** Real responses of the workflow routes against the committed OpenAPI document. */

const h = useToolLoopHarness();
const { act } = pipelineRequests(() => h);

function inject(method: 'GET' | 'POST', url: string, extra: Record<string, unknown> = {}) {
  return h.testApp.app.inject({
    method,
    url,
    ...extra,
    headers: { ...bearer(h.tenant.key), ...((extra.headers as object) ?? {}) },
  } as never) as unknown as Promise<LightMyRequestResponse>;
}

async function pausedAtCheckpoint() {
  h.provider.enqueue(
    planReply(stage('a', { checkpoint: true }), stage('b')),
    answer('Result of a.'),
  );
  const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'Compare x', mode: 'complex' });
  const paused = await waitForStatus(h.testApp, h.tenant.key, id, ['awaiting_input', 'failed']);
  expect(paused.status).toBe('awaiting_input');
  return { id, version: paused.version };
}

describe('responses match openapi/openapi.json', () => {
  it('error bodies are served with the content type the document names', async () => {
    const response = await inject('GET', `/v1/workflows/${randomUUID()}`);
    expect(response.statusCode).toBe(404);
    expect(openApiProblems('GET', '/v1/workflows/{id}', response)).toEqual([]);
  });

  it('every status a workflow route answers is documented, and bodies validate', async () => {
    const problems: string[] = [];
    const check = (method: string, path: string, response: LightMyRequestResponse) =>
      problems.push(...openApiProblems(method, path, response));

    const { id, version } = await pausedAtCheckpoint();
    check('GET', '/v1/workflows/{id}', await inject('GET', `/v1/workflows/${id}`));
    check('GET', '/v1/workflows', await inject('GET', '/v1/workflows?limit=1'));
    check(
      'GET',
      '/v1/workflows/{id}/pipeline',
      await inject('GET', `/v1/workflows/${id}/pipeline`),
    );
    check('GET', '/v1/workflows/{id}/trace', await inject('GET', `/v1/workflows/${id}/trace`));
    check(
      'GET',
      '/v1/workflows/{id}/trace',
      await inject('GET', `/v1/workflows/${randomUUID()}/trace`),
    );
    // A path parameter too long (README: 414 path_parameter_too_long).
    check('GET', '/v1/workflows/{id}', await inject('GET', `/v1/workflows/${'a'.repeat(101)}`));
    // An action body that is not JSON (README: 415 unsupported_media_type).
    check(
      'POST',
      '/v1/workflows/{id}/continue',
      await inject('POST', `/v1/workflows/${id}/continue`, {
        payload: 'hello',
        headers: { 'content-type': 'text/plain' },
      }),
    );
    check(
      'POST',
      '/v1/workflows/{id}/cancel',
      await inject('POST', `/v1/workflows/${id}/cancel`, {
        payload: 'hello',
        headers: { 'content-type': 'text/plain' },
      }),
    );
    // A body past BODY_LIMIT_BYTES (README: 413 payload_too_large).
    check(
      'POST',
      '/v1/workflows/{id}/modify',
      await inject('POST', `/v1/workflows/${id}/modify`, {
        payload: JSON.stringify({ feedback: 'x'.repeat(1_100_000) }),
        headers: { 'content-type': 'application/json' },
      }),
    );
    check('POST', '/v1/workflows/{id}/answer', await act(id, 'answer', { answer: 'yes' }));
    check(
      'POST',
      '/v1/workflows/{id}/continue',
      await act(id, 'continue', { version: version + 5 }),
    );
    h.provider.enqueue(answer('Result of b.'), answer('Final.'));
    check('POST', '/v1/workflows/{id}/continue', await act(id, 'continue', { version }));
    await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    check('POST', '/v1/workflows/{id}/cancel', await act(id, 'cancel'));
    check(
      'GET',
      '/v1/workflows/{id}/pipeline',
      await inject('GET', `/v1/workflows/${id}/pipeline`),
    );
    check('GET', '/v1/workflows/{id}/events', await inject('GET', `/v1/workflows/${id}/events`));
    check(
      'GET',
      '/v1/workflows/{id}/events',
      await inject('GET', `/v1/workflows/${id}/events`, { headers: { 'last-event-id': '99999' } }),
    );
    check('POST', '/v1/workflows/{id}/stream-token', await act(id, 'stream-token'));
    check('GET', '/healthz', (await h.testApp.app.inject({ url: '/healthz' })) as never);
    check('GET', '/readyz', (await h.testApp.app.inject({ url: '/readyz' })) as never);
    expect(problems).toEqual([]);
  });
});
