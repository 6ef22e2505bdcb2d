import { describe, expect, it } from 'vitest';
import type { FakeResponse } from '../fakes/provider-types.js';
import { useVendorsApp } from '../support/vendors-app.js';
import {
  cancelWorkflow,
  getWorkflow,
  startWorkflow,
  storedEvents,
  waitFor,
  waitForStatus,
} from '../support/workflows.js';

/**
 * The executor's model call through the real OpenAI and Anthropic
 * SDKs against the fake provider server: retries and fallbacks become
 * events, usage and cost reach the workflow, a provider failure fails the
 * workflow with the provider-neutral code, and a cancel aborts the HTTP
 * request to the provider. Chain: `primary` (OpenAI) -> `secondary` (Anthropic).
 */

const { provider, app, tenant } = useVendorsApp({
  models: [
    {
      name: 'primary',
      provider: 'oai',
      contextWindow: 8000,
      pricing: { input: 1, output: 2, cachedInput: 0.5 },
      fallbacks: ['secondary'],
    },
    {
      name: 'secondary',
      provider: 'ant',
      contextWindow: 8000,
      pricing: { input: 10, output: 20, cachedInput: 5 },
    },
  ],
  defaultModel: 'primary',
  tenantName: 'models',
  env: {
    LLM_BACKOFF_BASE_MS: '5',
    LLM_BACKOFF_MAX_MS: '20',
    LLM_MAX_RETRIES_PER_MODEL: '1',
    LLM_BREAKER_THRESHOLD: '100',
  },
});

const ok: FakeResponse = { kind: 'reply', text: 'Hello there', usage: { input: 10, output: 3 } };

async function run(input: string) {
  const id = await startWorkflow(app(), tenant().key, { input });
  const workflow = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
  return { workflow, events: await storedEvents(app(), id) };
}

describe('the model call of a workflow', () => {
  it('a retried attempt is an llm_retry event; usage and cost reach the workflow', async () => {
    provider().enqueue({ kind: 'error', status: 500 }, ok);
    const { workflow, events } = await run('Say hello');
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Hello there' },
      usage: { inputTokens: 10, outputTokens: 3, cachedInputTokens: 0, costUsd: 16e-6 },
    });
    expect(events.map((event) => [event.type, event.status])).toEqual([
      ['workflow_start', 'started'],
      ['classification', 'completed'],
      ['llm_call', 'started'],
      ['llm_retry', 'retrying'],
      ['llm_call', 'completed'],
      ['answer', 'completed'],
      ['usage', 'info'],
      ['workflow_end', 'completed'],
    ]);
    expect(events[3]?.detail).toMatchObject({
      model: 'primary',
      attempt: 2,
      error: { code: 'llm_server_error', message: 'The model provider failed' },
    });
    // The question reached the provider as the user message.
    expect(provider().requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'user',
      content: 'Say hello',
    });
  });

  it('a fallback is an llm_fallback event, and the usage is priced at the model that answered (the usage event names the workflow’s model)', async () => {
    provider().enqueue({ kind: 'error', status: 500 }, { kind: 'error', status: 500 }, ok);
    const { workflow, events } = await run('Fall back');
    expect(workflow.status).toBe('completed');
    const fallback = events.find((event) => event.type === 'llm_fallback');
    expect(fallback).toMatchObject({
      status: 'info',
      detail: { from: 'primary', to: 'secondary', reason: 'error' },
    });
    expect(events.find((event) => event.type === 'usage')?.detail).toMatchObject({
      model: 'primary',
      costUsd: (10 * 10 + 3 * 20) / 1e6,
    });
    expect(
      events.find((event) => event.type === 'llm_call' && event.status === 'completed'),
    ).toMatchObject({ detail: { model: 'secondary' } });
  });

  it('a provider error that is not retried fails the workflow with a provider-neutral error', async () => {
    provider().enqueue({ kind: 'error', status: 400, type: 'invalid_request' });
    const { workflow, events } = await run('Bad request');
    expect(workflow).toMatchObject({
      status: 'failed',
      result: null,
      error: { code: 'llm_invalid_request', message: 'The model provider rejected the request' },
    });
    expect(events.map((event) => [event.type, event.status])).toEqual([
      ['workflow_start', 'started'],
      ['classification', 'completed'],
      ['llm_call', 'started'],
      ['llm_call', 'failed'],
      ['workflow_end', 'failed'],
    ]);
  });

  it('a cancel aborts the HTTP request to the provider', async () => {
    const abortedBefore = provider().abortedRequests();
    provider().enqueue({ kind: 'stall', afterChunks: ['Thinking'] });
    const arrived = provider().nextRequest();
    const id = await startWorkflow(app(), tenant().key, { input: 'Think hard' });
    await arrived;
    expect((await cancelWorkflow(app(), tenant().key, id)).statusCode).toBe(202);
    await waitFor(
      () => (provider().abortedRequests() > abortedBefore ? true : undefined),
      'the provider request to be aborted',
      1_000,
    );
    await waitFor(
      () => (app().services.executions.isRunning(id) ? undefined : true),
      'the run to stop',
      1_000,
    );
    expect((await getWorkflow(app(), tenant().key, id)).status).toBe('cancelled');
  });
});
