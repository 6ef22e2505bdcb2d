import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { expect } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer, FakeResponse, FakeToolCall } from '../fakes/provider-types.js';
import { bearer, startTestApp, type TestApp } from './app.js';
import { startToolServer, type ToolServer } from './tool-server.js';
import {
  bootstrapOperator,
  createTenant,
  startWorkflow,
  storedEvents,
  type TestTenant,
  waitForStatus,
} from './workflows.js';

/**
 * An app whose catalogue points at the fake provider server (`gpt` on the
 * OpenAI API, `claude` on the Anthropic one) and a local tool server for
 * HTTP tools: `/slow/<id>` answers after 150 ms and records its start and
 * end times, `/fail` answers 500, `/hang` never answers.
 */

export const MAX_ITERATIONS = 4;

export const callsTo = (...calls: FakeToolCall[]): FakeResponse => ({
  kind: 'reply',
  toolCalls: calls,
});
export const answer = (text: string): FakeResponse => ({ kind: 'reply', text });

export async function startToolLoopHarness() {
  const provider: FakeProviderServer = await startFakeProviderServer();
  const tools: ToolServer = await startToolServer();
  /** Start and end time of each tool server call, by path. */
  const timings = new Map<string, { start: number; end: number }>();
  tools.handle((call, response) => answerTool(call.path, response, timings));
  const model = (name: string, providerName: string) => ({
    name,
    provider: providerName,
    modelId: `${name}-id`,
    contextWindow: 32_000,
    maxOutputTokens: 256,
  });
  const testApp: TestApp = await startTestApp({
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        { name: 'oai', kind: 'openai', baseUrl: provider.openaiBaseUrl },
        { name: 'ant', kind: 'anthropic', baseUrl: provider.anthropicBaseUrl },
      ],
      models: [model('gpt', 'oai'), model('claude', 'ant')],
      defaultModel: 'gpt',
    }),
    LOOP_MAX_ITERATIONS: String(MAX_ITERATIONS),
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    LLM_MAX_RETRIES_PER_MODEL: '0',
    RATE_LIMIT_MAX: '100000',
  });
  const tenant: TestTenant = await createTenant(testApp, await bootstrapOperator(testApp), {
    name: 'loop',
  });

  return {
    provider,
    tools,
    testApp,
    tenant,
    timings,

    /** Registers an HTTP tool at a tool server path under a fresh name. */
    async registerTool(path: string, extra: Record<string, unknown> = {}): Promise<string> {
      const name = `t_${randomUUID().slice(0, 8)}`;
      const response = await testApp.app.inject({
        method: 'POST',
        url: '/v1/tools',
        headers: bearer(tenant.key),
        payload: {
          name,
          description: 'A test tool',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
          url: `${tools.origin}${path}`,
          ...extra,
        },
      });
      expect(response.statusCode, response.body).toBe(201);
      return name;
    },

    /** Starts a workflow and waits until it completes or fails. */
    async run(input: string, modelName = 'gpt') {
      const id = await startWorkflow(testApp, tenant.key, { input, model: modelName });
      const workflow = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
      return { id, workflow, events: await storedEvents(testApp, id) };
    },

    /** The OpenAI tool messages of the last request, in order. */
    toolMessages(): { tool_call_id: string; content: string }[] {
      const body = provider.requests.at(-1)?.body;
      return (body.messages as { role: string; tool_call_id: string; content: string }[]).filter(
        (message) => message.role === 'tool',
      );
    },

    async close(): Promise<void> {
      await testApp.close();
      await tools.close();
      await provider.close();
    },
  };
}

export type ToolLoopHarness = Awaited<ReturnType<typeof startToolLoopHarness>>;

function answerTool(
  path: string,
  response: ServerResponse,
  timings: Map<string, { start: number; end: number }>,
): void {
  if (path === '/hang') return;
  if (path === '/fail') {
    response.writeHead(500, { 'content-type': 'text/plain' });
    response.end('the weather station is down');
    return;
  }
  const start = Date.now();
  setTimeout(() => {
    timings.set(path, { start, end: Date.now() });
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ path }));
  }, 150);
}
