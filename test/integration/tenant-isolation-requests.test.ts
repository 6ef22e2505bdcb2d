import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createStreamTokens } from '../../src/tenancy/stream-tokens.js';
import {
  A_SECRET,
  expectSameProblem,
  IDEMPOTENCY_KEY,
  IDEMPOTENT_BODY,
  useIsolationFixture,
} from '../support/tenant-isolation.js';
import { answer, offeredToolsOf } from '../support/tool-loop-harness.js';
import { countWorkflows, waitForStatus } from '../support/workflows.js';

/**
 * Tenant isolation of what a request names rather than the resource its
 * path names: sessions, tools, MCP servers, models and Idempotency-Keys in
 * a create, stream tokens, the tools a run is offered, and what an
 * operator or another tenant's admin may do (README: only an operator
 * admin creates and changes tenants and reads the metrics).
 */

const f = useIsolationFixture();

describe('a create of tenant B naming tenant A’s things', () => {
  it('A’s session is an unknown session, answered as one that does not exist, and no row is written', async () => {
    const b = f.b();
    const before = await countWorkflows(f.h.testApp, b.id);
    const post = (sessionId: string) =>
      f.call(b.key, 'POST', '/v1/workflows', { body: { input: 'Go on', sessionId } });
    const onA = await post(f.a().sessionId);
    expect(onA.status, onA.text).toBe(400);
    expect(onA.json.code).toBe('unknown_session');
    expectSameProblem(onA, await post(randomUUID()));
    expect(await countWorkflows(f.h.testApp, b.id)).toBe(before);
  });

  it('A’s HTTP tool and the tools under A’s MCP server are unknown tools', async () => {
    const a = f.a();
    for (const tool of [a.toolName, `${a.mcpServerName}__add`]) {
      const reply = await f.call(f.b().key, 'POST', '/v1/workflows', {
        body: { input: 'Use it', tools: [tool] },
      });
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json).toMatchObject({ code: 'unknown_tool' });
    }
  });

  it('A’s Idempotency-Key with A’s very body makes B a workflow of its own, not a replay of A’s', async () => {
    const a = f.a();
    const b = f.b();
    f.h.provider.enqueue(answer('B’s order.'));
    const reply = await f.call(b.key, 'POST', '/v1/workflows', {
      body: IDEMPOTENT_BODY,
      headers: { 'idempotency-key': IDEMPOTENCY_KEY },
    });
    expect(reply.status, reply.text).toBe(202);
    expect(reply.headers.get('idempotent-replayed')).toBeNull();
    expect(reply.json.id).not.toBe(a.idempotentId);
    await waitForStatus(f.h.testApp, b.key, reply.json.id, ['completed']);
    // And A's key still replays A's workflow.
    const again = await f.call(a.key, 'POST', '/v1/workflows', {
      body: IDEMPOTENT_BODY,
      headers: { 'idempotency-key': IDEMPOTENCY_KEY },
    });
    expect(again.status, again.text).toBe(200);
    expect(again.json.id).toBe(a.idempotentId);
  });

  it('a run of B is offered B’s tools and the built-ins, none of A’s, though A’s were read last here', async () => {
    const b = f.b();
    const bTool = await f.call(b.key, 'POST', '/v1/tools', {
      body: {
        name: 'b_weather',
        description: 'B’s weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
        url: `${f.h.tools.origin}/weather`,
      },
    });
    expect(bTool.status, bTool.text).toBe(201);
    // A's run reads A's tools, which this replica then remembers for A.
    f.h.provider.enqueue(answer('A again.'), answer('B’s turn.'));
    for (const key of [f.a().key, b.key]) {
      const first = f.h.provider.requests.length;
      const created = await f.call(key, 'POST', '/v1/workflows', { body: { input: 'Hello' } });
      expect(created.status, created.text).toBe(202);
      await waitForStatus(f.h.testApp, key, created.json.id, ['completed']);
      const offered = offeredToolsOf(f.h.provider.requests[first]);
      const a = f.a();
      if (key === b.key) {
        expect(offered).toContain('b_weather');
        expect(offered).not.toContain(a.toolName);
        expect(offered.filter((name) => name.startsWith(`${a.mcpServerName}__`))).toEqual([]);
      } else {
        expect(offered).toContain(a.toolName);
        expect(offered).not.toContain('b_weather');
      }
    }
  });
});

describe('stream tokens across tenants', () => {
  it('B’s token for its own workflow opens nothing of A’s: 401 stream_token_scope, as for an id no tenant has', async () => {
    const b = f.b();
    f.h.provider.enqueue(answer('B streams.'));
    const created = await f.call(b.key, 'POST', '/v1/workflows', { body: { input: 'Stream me' } });
    await waitForStatus(f.h.testApp, b.key, created.json.id, ['completed']);
    const issued = await f.call(b.key, 'POST', `/v1/workflows/${created.json.id}/stream-token`);
    expect(issued.status, issued.text).toBe(200);
    const open = (id: string) =>
      f.call(undefined, 'GET', `/v1/workflows/${id}/events?token=${issued.json.token}`);
    const onA = await open(f.a().completedId);
    expect(onA.status, onA.text).toBe(401);
    expect(onA.json.code).toBe('stream_token_scope');
    expectSameProblem(onA, await open(randomUUID()));
  });

  it('a genuine token whose grant is B’s but names A’s workflow reads as B: 404, as for an id no tenant has', async () => {
    const a = f.a();
    const tokens = createStreamTokens({ db: f.h.testApp.services.database.db, ttlSeconds: 60 });
    const open = async (workflowId: string) => {
      const { token } = await tokens.issue({ tenantId: f.b().id, workflowId });
      return f.call(undefined, 'GET', `/v1/workflows/${workflowId}/events?token=${token}`);
    };
    const onA = await open(a.completedId);
    expect(onA.status, onA.text).toBe(404);
    expect(onA.json.code).toBe('not_found');
    expect(onA.text).not.toContain(A_SECRET);
    expectSameProblem(onA, await open(randomUUID()));
  });
});

describe('operators and other tenants’ admins', () => {
  it('the operator’s admin key reads and changes no workflow, session or tool of A: 404 as for none', async () => {
    const a = f.a();
    const operator = f.h.operatorKey;
    await f.expectUnknown(operator, 'GET', (x) => `/v1/workflows/${x}`, a.completedId);
    await f.expectUnknown(operator, 'POST', (x) => `/v1/workflows/${x}/cancel`, a.askingId);
    await f.expectUnknown(operator, 'GET', (x) => `/v1/sessions/${x}`, a.sessionId);
    await f.expectUnknown(operator, 'GET', (x) => `/v1/tools/${x}`, a.toolId);
    await f.expectUnknown(operator, 'DELETE', (x) => `/v1/api-keys/${x}`, a.memberKeyId);
    const listing = await f.call(operator, 'GET', '/v1/workflows?limit=100');
    expect(listing.text).not.toContain(a.completedId);
  });

  it('B’s admin changes no tenant, A’s nor its own, nor reads the metrics: 403 whatever the id', async () => {
    const b = f.b();
    const replies = await Promise.all(
      [f.a().id, b.id, randomUUID()].map((id) =>
        f.call(b.key, 'PATCH', `/v1/tenants/${id}`, { body: { budget: { maxTokens: 1 } } }),
      ),
    );
    for (const reply of replies) {
      expect(reply.status, reply.text).toBe(403);
      expect(reply.json.code).toBe('operator_only');
    }
    expect((await f.call(b.key, 'POST', '/v1/tenants', { body: { name: 'x' } })).status).toBe(403);
    const metrics = await f.call(b.key, 'GET', '/metrics');
    expect(metrics.status).toBe(403);
    expect(metrics.json.code).toBe('operator_only');
  });

  it('the operator’s metrics name no tenant, workflow, session, tool or MCP server', async () => {
    const a = f.a();
    const metrics = await f.call(f.h.operatorKey, 'GET', '/metrics');
    expect(metrics.status).toBe(200);
    for (const value of [a.id, f.b().id, a.completedId, a.sessionId, a.toolName, a.mcpServerName]) {
      expect(metrics.text).not.toContain(value);
    }
  });
});

describe('budgets and models per tenant', () => {
  it('A’s budget cap and allowed models bind A’s requests, not B’s', async () => {
    const a = f.a();
    const b = f.b();
    const patched = await f.call(f.h.operatorKey, 'PATCH', `/v1/tenants/${a.id}`, {
      body: { budget: { maxTokens: 1000 }, allowedModels: ['gpt'] },
    });
    expect(patched.status, patched.text).toBe(200);
    const post = (key: string, body: Record<string, unknown>) =>
      f.call(key, 'POST', '/v1/workflows', { body: { input: 'Budgeted', ...body } });
    const overA = await post(a.key, { budget: { maxTokens: 5000 } });
    expect(overA.json?.code, overA.text).toBe('budget_exceeds_limit');
    expect((await post(a.key, { model: 'claude' })).json?.code).toBe('model_not_allowed');
    f.h.provider.enqueue(answer('Within B’s budget.'), answer('B may use claude.'));
    for (const body of [{ budget: { maxTokens: 5000 } }, { model: 'claude' }]) {
      const reply = await post(b.key, body);
      expect(reply.status, reply.text).toBe(202);
      await waitForStatus(f.h.testApp, b.key, reply.json.id, ['completed']);
    }
    const models = await f.call(b.key, 'GET', '/v1/models');
    expect(models.json.items.map((model: { name: string }) => model.name).sort()).toEqual([
      'claude',
      'gpt',
    ]);
  });
});
