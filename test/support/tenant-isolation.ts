import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect } from 'vitest';
import { bearer, listenLocally } from './app.js';
import { type McpTestServer, startMcpTestServer } from './mcp-server.js';
import { pipelineRequests } from './pipeline-http.js';
import { answer, callsTo, type ToolLoopHarness, useToolLoopHarness } from './tool-loop-harness.js';
import { createSession, createTenant, type TestTenant, waitForStatus } from './workflows.js';

/**
 * Two tenants on one app over real sockets, for the tenant isolation
 * tests: tenant A (the harness's tenant) owns one of everything a tenant
 * can own; tenant B asks for it with its own keys and must find nothing.
 */

/** Everything of tenant A that tenant B tries to reach. */
export interface TenantAObjects {
  memberKey: string;
  memberKeyId: string;
  sessionId: string;
  /** Completed in the session, so the session holds its question and answer. */
  completedId: string;
  /** Paused by ask_user (awaiting_input, clarification). */
  askingId: string;
  /** A pipeline paused at its checkpoint (awaiting_input, checkpoint). */
  checkpointId: string;
  /** Created with Idempotency-Key IDEMPOTENCY_KEY and IDEMPOTENT_BODY. */
  idempotentId: string;
  toolId: string;
  toolName: string;
  mcpServerId: string;
  mcpServerName: string;
}

export const IDEMPOTENCY_KEY = 'order-42';
export const IDEMPOTENT_BODY = { input: 'Summarise order 42', model: 'gpt' };
/** The text of tenant A's session and workflows, which nothing of tenant B may show. */
export const A_SECRET = 'alpha-confidential';

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: assertions on JSON bodies of every route are the type check.
  json: any;
}

export interface IsolationFixture {
  h: ToolLoopHarness;
  a: () => TenantAObjects & { key: string; id: string };
  b: () => TestTenant & { memberKey: string };
  /** A request over a real socket; `body` is sent as JSON. */
  call(
    key: string | undefined,
    method: string,
    path: string,
    options?: { body?: unknown; headers?: Record<string, string> },
  ): Promise<Reply>;
  /**
   * Asserts that `path(idOfA)` answers B's `key` exactly as `path` of an id
   * no tenant has: 404 `not_found`, the same problem but for the request id
   * and the id in `instance`; returns the answer on A's id.
   */
  expectUnknown(
    key: string,
    method: string,
    path: (id: string) => string,
    idOfA: string,
    body?: unknown,
  ): Promise<Reply>;
}

/** The harness's app listening on a port, tenant A's objects made through its API, and tenant B. */
export function useIsolationFixture(): IsolationFixture {
  const h = useToolLoopHarness({ env: { HTTP_TOOLS_ALLOW_PRIVATE: 'true' } });
  let base = '';
  let mcp: McpTestServer | undefined;
  let objects: TenantAObjects | undefined;
  let tenantB: (TestTenant & { memberKey: string }) | undefined;

  async function call(
    key: string | undefined,
    method: string,
    path: string,
    options: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<Reply> {
    const headers: Record<string, string> = { ...(key ? bearer(key) : {}), ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    const text = await response.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: response.status, headers: response.headers, text, json };
  }

  async function ok(reply: Promise<Reply>, status = 200): Promise<Reply> {
    const done = await reply;
    expect(done.status, done.text).toBe(status);
    return done;
  }

  beforeAll(async () => {
    base = (await listenLocally(h.testApp.app)).url;
    mcp = await startMcpTestServer();
    const keyA = h.tenant.key;
    await h.registerMcpServer('a_calc', mcp.url);
    const toolName = await h.registerTool('/weather');
    const member = await ok(
      call(keyA, 'POST', '/v1/api-keys', { body: { name: 'a member', scopes: ['member'] } }),
      201,
    );
    const sessionId = await createSession(h.testApp, keyA, {
      title: `${A_SECRET} session`,
      metadata: { user: 'alice' },
    });
    const finished = async (body: Record<string, unknown>, headers = {}) => {
      const created = await ok(call(keyA, 'POST', '/v1/workflows', { body, headers }), 202);
      const id = created.json.id as string;
      await waitForStatus(h.testApp, keyA, id, ['completed']);
      return id;
    };
    h.provider.enqueue(answer(`${A_SECRET} answer`));
    const completedId = await finished({ input: `${A_SECRET} question`, sessionId });
    h.provider.enqueue(answer('Order 42: two items.'));
    const idempotentId = await finished(IDEMPOTENT_BODY, { 'idempotency-key': IDEMPOTENCY_KEY });
    h.provider.enqueue(
      callsTo({
        id: 'call_ask',
        name: 'ask_user',
        arguments: { question: 'Go on?', question_type: 'yes_no', context: A_SECRET },
      }),
    );
    const asking = await ok(
      call(keyA, 'POST', '/v1/workflows', { body: { input: 'Ask me first', mode: 'simple' } }),
      202,
    );
    await waitForStatus(h.testApp, keyA, asking.json.id, ['awaiting_input']);
    const checkpoint = await pipelineRequests(() => h).pausedAtCheckpoint(
      `${A_SECRET}: do a, then b, then c`,
    );
    const [tools, servers] = await Promise.all([
      ok(call(keyA, 'GET', '/v1/tools')),
      ok(call(keyA, 'GET', '/v1/mcp-servers')),
    ]);
    const tool = tools.json.items.find((item: { name: string }) => item.name === toolName);
    objects = {
      memberKey: member.json.key,
      memberKeyId: member.json.id,
      sessionId,
      completedId,
      askingId: asking.json.id,
      checkpointId: checkpoint.id,
      idempotentId,
      toolId: tool.id,
      toolName,
      mcpServerId: servers.json.items[0].id,
      mcpServerName: servers.json.items[0].name,
    };
    const b = await createTenant(h.testApp, h.operatorKey, { name: 'tenant b' });
    const bMember = await ok(
      call(b.key, 'POST', '/v1/api-keys', { body: { name: 'b member', scopes: ['member'] } }),
      201,
    );
    tenantB = { ...b, memberKey: bMember.json.key };
  });
  afterAll(async () => {
    // Streams a test opened leave sockets that would hold the app's close open.
    h.testApp?.app.server.closeAllConnections();
    await mcp?.close();
  });

  function started<T>(value: T | undefined): T {
    if (value === undefined) throw new Error('the isolation fixture starts in beforeAll');
    return value;
  }

  return {
    h,
    a: () => ({ ...started(objects), key: h.tenant.key, id: h.tenant.id }),
    b: () => started(tenantB),
    call,
    async expectUnknown(key, method, path, idOfA, body) {
      const onA = await call(key, method, path(idOfA), { body });
      const onNone = await call(key, method, path(randomUUID()), { body });
      const where = `${method} ${path(':id')}`;
      expect(onA.status, `${where}: ${onA.text}`).toBe(404);
      expect(onA.headers.get('content-type'), where).toBe(onNone.headers.get('content-type'));
      if (method === 'HEAD') return onA;
      expect(onA.json?.code, where).toBe('not_found');
      expectSameProblem(onA, onNone, where);
      return onA;
    },
  };
}

/**
 * Asserts two problems are the same but for what differs by request: the
 * request id and the path in `instance`. What a client could tell them apart
 * by otherwise would tell it which id exists.
 */
export function expectSameProblem(one: Reply, other: Reply, what?: string): void {
  const shape = (reply: Reply) => ({ ...reply.json, requestId: undefined, instance: undefined });
  expect(shape(one), what).toEqual(shape(other));
  expect(one.headers.get('content-type'), what).toBe(other.headers.get('content-type'));
}
