import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { PoolClient } from 'pg';
import { afterAll, beforeAll, expect, vi } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type {
  FakeProviderServer,
  FakeResponse,
  FakeToolCall,
  RecordedRequest,
} from '../fakes/provider-types.js';
import { bearer, startTestApp, startTestAppOn, type TestApp } from './app.js';
import { type ReceivedCall, startToolServer, type ToolServer } from './tool-server.js';
import { vendorCatalogue } from './vendors-app.js';
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
 * end times, `/fail` answers 500, `/hang` never answers (and records when
 * its caller gave up), `/pages` answers a
 * page of text as long as asked (see pageText), and `/counted/<id>/<ms>`
 * answers after `<ms>` ms and counts the calls in flight at once
 * (`inFlight`).
 */

export const MAX_ITERATIONS = 4;

export const callsTo = (...calls: FakeToolCall[]): FakeResponse => ({
  kind: 'reply',
  toolCalls: calls,
});
export const answer = (text: string): FakeResponse => ({ kind: 'reply', text });

export interface ToolLoopHarnessOptions {
  /** Context window of both models, in tokens; small ones reach the loop's thresholds in a few turns. */
  contextWindow?: number;
  /** Maximum output of both models, in tokens; 256 unless given. */
  maxOutputTokens?: number;
  /** The loop's iteration cap; MAX_ITERATIONS unless given. */
  maxIterations?: number;
  /** Both models' prices, US dollars per million tokens; free unless given. */
  pricing?: { input: number; output: number; cachedInput: number };
  /** More settings of the app (BUDGET_MAX_TOKENS, say). */
  env?: Record<string, string>;
}

export async function startToolLoopHarness(options: ToolLoopHarnessOptions = {}) {
  const provider: FakeProviderServer = await startFakeProviderServer();
  const tools: ToolServer = await startToolServer();
  /** Start and end time of each tool server call, by path. */
  const timings = new Map<string, { start: number; end: number }>();
  /** `/slow/…` paths whose answer waits for the test (startWithHeldTurnWrite), with its release once called. */
  const holds = new Map<string, (() => void) | undefined>();
  /** `/counted/…` calls answered not yet, and the most there were at once since the test reset it. */
  const inFlight = { now: 0, most: 0 };
  tools.handle((call, response) => answerTool(call, response, { timings, holds, inFlight }));
  const shared = {
    contextWindow: options.contextWindow,
    maxOutputTokens: options.maxOutputTokens,
    pricing: options.pricing,
  };
  const env: Record<string, string> = {
    WAYMARK_MODELS: vendorCatalogue(provider, {
      models: [
        { name: 'gpt', provider: 'oai', ...shared },
        { name: 'claude', provider: 'ant', ...shared },
      ],
      defaultModel: 'gpt',
    }),
    BUDGET_MAX_ITERATIONS: String(options.maxIterations ?? MAX_ITERATIONS),
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    LLM_MAX_RETRIES_PER_MODEL: '0',
    RATE_LIMIT_MAX: '100000',
    ...options.env,
  };
  const testApp: TestApp = await startTestApp(env);
  const replicas: TestApp[] = [];
  const operatorKey = await bootstrapOperator(testApp);
  const tenant: TestTenant = await createTenant(testApp, operatorKey, { name: 'loop' });

  /** Registers an HTTP tool at a tool server path under a fresh name. */
  async function registerTool(path: string, extra: Record<string, unknown> = {}): Promise<string> {
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
  }

  /** Registers an MCP server (a test server at `url`) for the tenant under `name`; `extra` goes into the body. */
  async function registerMcpServer(
    name: string,
    url: string,
    extra: Record<string, unknown> = {},
  ): Promise<void> {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(tenant.key),
      payload: { name, url, ...extra },
    });
    expect(response.statusCode, response.body).toBe(201);
  }

  return {
    provider,
    tools,
    testApp,
    operatorKey,
    tenant,
    timings,
    inFlight,

    registerTool,
    registerMcpServer,

    /**
     * Holds the answer to the next call of a `/slow/…` path until
     * `release()` (then 150 ms more, as any); `called` resolves once that
     * call has arrived. Later calls are answered as usual.
     */
    holdNextCall(path: string): { called: Promise<void>; release: () => void } {
      holds.set(path, undefined);
      const called = vi.waitFor(() => expect(holds.get(path)).toBeDefined(), {
        timeout: 15_000,
        interval: 10,
      });
      return {
        called,
        release: () => {
          holds.get(path)?.();
          holds.delete(path);
        },
      };
    },

    /**
     * Another replica on the same database, with the same models and
     * settings but for `overrides`; closed with the harness.
     */
    async startReplica(overrides: Record<string, string>): Promise<TestApp> {
      const replica = await startTestAppOn(testApp.database, { ...env, ...overrides });
      replicas.push(replica);
      return replica;
    },

    /**
     * Starts a workflow and waits until it completes or fails; `requests`
     * are the ones the fake provider received meanwhile. `extra` goes into
     * the request body (`tools`, say).
     */
    async run(input: string, modelName = 'gpt', extra: Record<string, unknown> = {}) {
      const first = provider.requests.length;
      const id = await startWorkflow(testApp, tenant.key, { input, model: modelName, ...extra });
      const workflow = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
      const requests = provider.requests.slice(first);
      return { id, workflow, events: await storedEvents(testApp, id), requests };
    },

    /**
     * Starts a workflow whose first turn calls a slow tool (at a `/slow/…`
     * path), and while the tool runs locks the workflow's row from a
     * connection of the app's pool: the turn's write then waits for `lock`
     * to commit or roll back. The tool answers only once the row is locked
     * (on a loaded host its 150 ms could pass before the lock was taken,
     * and the turn was written without waiting). `after`: the fake's
     * replies to the requests that follow the first. The caller releases
     * `lock`.
     */
    async startWithHeldTurnWrite(
      path: string,
      ...after: FakeResponse[]
    ): Promise<{ id: string; lock: PoolClient; requestsBefore: number }> {
      const tool = await registerTool(path);
      const requestsBefore = provider.requests.length;
      provider.enqueue(callsTo({ name: tool, arguments: {} }), ...after);
      holds.set(path, undefined);
      const lock = await testApp.services.database.pool.connect();
      try {
        const id = await startWorkflow(testApp, tenant.key, { input: 'Use the tool' });
        await vi.waitFor(() => expect(holds.get(path)).toBeDefined());
        // The turn's events so far are written on their own (progressFlushMs)
        // while the tool runs: locked first, that append would be the
        // statement waiting, and the turn's write would queue behind it in
        // the run rather than in PostgreSQL.
        await vi.waitFor(
          async () => {
            const events = await storedEvents(testApp, id);
            expect(
              events.some((event) => event.type === 'tool_call' && event.status === 'started'),
            ).toBe(true);
          },
          { timeout: 15_000, interval: 20 },
        );
        await lock.query('BEGIN');
        await lock.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [id]);
        return { id, lock, requestsBefore };
      } catch (error) {
        lock.release();
        throw error;
      } finally {
        holds.get(path)?.();
        holds.delete(path);
      }
    },

    async close(): Promise<void> {
      for (const replica of replicas) await replica.close();
      await testApp.close();
      await tools.close();
      await provider.close();
    },
  };
}

export type ToolLoopHarness = Awaited<ReturnType<typeof startToolLoopHarness>>;

/**
 * The test file's harness, started before its tests (beforeAll) and closed
 * after them (afterAll, after the file's own): the object returned is
 * filled in once it has started, so tests use it as they would the
 * harness itself.
 */
export function useToolLoopHarness(options: ToolLoopHarnessOptions = {}): ToolLoopHarness {
  // Empty until beforeAll: no test reads it before then.
  const harness = {} as ToolLoopHarness;
  beforeAll(async () => {
    Object.assign(harness, await startToolLoopHarness(options));
  });
  afterAll(async () => {
    // Absent when the start failed.
    if ('close' in harness) await harness.close();
  });
  return harness;
}

/**
 * The system prompt a request carried, as one text: OpenAI's system message,
 * or Anthropic's `system` blocks joined; empty without a request.
 */
export function systemTextOf(request: RecordedRequest | undefined): string {
  if (!request) return '';
  const { body } = request;
  if (request.api === 'anthropic') {
    const system: string | { text: string }[] = body.system ?? [];
    return typeof system === 'string' ? system : system.map((block) => block.text).join('\n');
  }
  const messages = body.messages as { role: string; content: string }[];
  return messages
    .filter((message) => message.role === 'system')
    .map((message) => message.content)
    .join('\n');
}

/**
 * The tool results a request carried, in order, for either API: OpenAI's
 * `tool` messages and Anthropic's `tool_result` blocks; none without a request.
 */
export function toolResultsOf(
  request: RecordedRequest | undefined,
): { callId: string; content: string }[] {
  if (!request) return [];
  const { body } = request;
  if (request.api === 'anthropic') {
    const messages = body.messages as { content: string | Record<string, unknown>[] }[];
    return messages
      .flatMap((message) => (typeof message.content === 'string' ? [] : message.content))
      .filter((block) => block.type === 'tool_result')
      .map((block) => ({
        callId: String(block.tool_use_id),
        content: String(block.content ?? ''),
      }));
  }
  const messages = body.messages as { role: string; tool_call_id: string; content: string }[];
  return messages
    .filter((message) => message.role === 'tool')
    .map((message) => ({ callId: message.tool_call_id, content: message.content }));
}

/**
 * The tool choice a request made, for either API: OpenAI's `tool_choice`
 * or Anthropic's `tool_choice.type` (`none`, `auto`, `any`); undefined
 * when it offered no tools.
 */
export function toolChoiceOf(request: RecordedRequest | undefined): string | undefined {
  const choice = request?.body.tool_choice;
  return request?.api === 'anthropic' ? choice?.type : choice;
}

/** The names of the tools a request offered, for either API. */
export function offeredToolsOf(request: RecordedRequest | undefined): string[] {
  if (request?.api === 'anthropic') {
    return ((request.body.tools ?? []) as { name: string }[]).map((offer) => offer.name);
  }
  const tools = (request?.body.tools ?? []) as { function: { name: string } }[];
  return tools.map((offer) => offer.function.name);
}

/** The ids of the tool calls the assistant messages of a request made, in order, for either API. */
export function toolCallIdsOf(request: RecordedRequest): string[] {
  const { body } = request;
  if (request.api === 'anthropic') {
    const messages = body.messages as { content: string | Record<string, unknown>[] }[];
    return messages
      .flatMap((message) => (typeof message.content === 'string' ? [] : message.content))
      .filter((block) => block.type === 'tool_use')
      .map((block) => String(block.id));
  }
  const messages = body.messages as { role: string; tool_calls?: { id: string }[] }[];
  return messages.flatMap((message) => (message.tool_calls ?? []).map((call) => call.id));
}

/**
 * The `/pages` answer: `page <n>:` and then ` data` until `chars` long.
 * Each ` data` is one token in OpenAI's o200k encoding, so a page's token
 * count is easy to aim for under either vendor's estimate.
 */
export function pageText(page: number, chars: number): string {
  const head = `page ${page}:`;
  const words = Math.max(0, Math.floor((chars - head.length) / 5));
  return head + ' data'.repeat(words);
}

function answerTool(
  call: ReceivedCall,
  response: ServerResponse,
  state: {
    timings: Map<string, { start: number; end: number }>;
    holds: Map<string, (() => void) | undefined>;
    inFlight: { now: number; most: number };
  },
): void {
  const { timings, holds, inFlight } = state;
  const { path } = call;
  if (path.startsWith('/counted/')) {
    inFlight.now += 1;
    inFlight.most = Math.max(inFlight.most, inFlight.now);
    // Counted out before the answer is sent: the caller cannot start another call before.
    setTimeout(
      () => {
        inFlight.now -= 1;
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ path }));
      },
      Number(path.split('/')[3]),
    );
    return;
  }
  if (path === '/hang') {
    // Never answered; the time its caller gave up (aborted the request) is its end.
    const start = Date.now();
    response.on('close', () => timings.set(path, { start, end: Date.now() }));
    return;
  }
  if (path === '/pages') {
    const { page, chars } = JSON.parse(call.body) as { page: number; chars: number };
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end(pageText(page, chars));
    return;
  }
  if (path === '/fail') {
    response.writeHead(500, { 'content-type': 'text/plain' });
    response.end('the weather station is down');
    return;
  }
  const start = Date.now();
  const answer = () => {
    timings.set(path, { start, end: Date.now() });
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ path }));
  };
  if (holds.has(path)) {
    // Held for the test: 150 ms after it lets go.
    holds.set(path, () => setTimeout(answer, 150));
    return;
  }
  setTimeout(answer, 150);
}
