import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { A_SECRET, expectSameProblem, useIsolationFixture } from '../support/tenant-isolation.js';
import { answer } from '../support/tool-loop-harness.js';
import { createSession, eventStored, waitForStatus } from '../support/workflows.js';

/**
 * Tenant isolation, route by route, over real sockets: every route that
 * names a resource by id answers tenant B's keys, member and admin, on
 * tenant A's resource exactly as on an id no tenant has (README: "Another
 * tenant's resources answer 404, as if they did not exist"), changes
 * nothing of it, and no listing of B's shows anything of A's, whatever
 * filter or cursor B passes.
 */

const f = useIsolationFixture();

/** A's resources as A reads them: what B's requests must leave as they were. */
async function snapshotOfA() {
  const a = f.a();
  const workflows = await Promise.all(
    [a.completedId, a.askingId, a.checkpointId, a.idempotentId].map(async (id) => {
      const { json } = await f.call(a.key, 'GET', `/v1/workflows/${id}`);
      return { id, status: json.status, version: json.version, lastSeq: json.lastSeq };
    }),
  );
  const read = async (path: string) => (await f.call(a.key, 'GET', path)).json;
  return {
    workflows,
    pipeline: await read(`/v1/workflows/${a.checkpointId}/pipeline`),
    session: await read(`/v1/sessions/${a.sessionId}?limit=100`),
    tools: await read('/v1/tools'),
    mcpServers: await read('/v1/mcp-servers'),
    // Without lastUsedAt, which A's own member key moves (its /v1/me below).
    apiKeys: ((await read('/v1/api-keys')).items as Record<string, unknown>[]).map(
      ({ lastUsedAt: _moved, ...key }) => key,
    ),
    memberKeyWorks: (await f.call(a.memberKey, 'GET', '/v1/me')).status,
  };
}

describe('tenant B on tenant A’s ids', () => {
  it('every route naming an id answers B’s admin and member keys as for an id no tenant has, and changes nothing of A’s', async () => {
    const a = f.a();
    const b = f.b();
    const before = await snapshotOfA();
    expect(before.session.messages).toHaveLength(2);
    expect(before.memberKeyWorks).toBe(200);
    const workflowRoutes: [string, string, string, unknown?][] = [
      ['GET', '', a.completedId],
      ['POST', '/cancel', a.askingId, {}],
      ['POST', '/cancel', a.checkpointId],
      // A finished workflow would answer 409 workflow_finished, were it found.
      ['POST', '/cancel', a.completedId],
      // A workflow waiting for something else would answer 409 not_awaiting_input.
      ['POST', '/answer', a.completedId, { answer: 'yes' }],
      ['POST', '/continue', a.askingId, {}],
      ['POST', '/answer', a.askingId, { answer: 'yes' }],
      ['POST', '/answer', a.askingId, { answer: '' }],
      ['POST', '/continue', a.checkpointId, {}],
      ['POST', '/retry', a.checkpointId],
      ['POST', '/modify', a.checkpointId, { feedback: 'Use euros', plan: { stages: [] } }],
      ['POST', '/modify', a.checkpointId, { feedback: 'x', plan: { stages: [{ nonsense: 1 }] } }],
      ['GET', '/pipeline', a.checkpointId],
      // A simple workflow has no plan: its own 404 would name the pipeline, not the workflow.
      ['GET', '/pipeline', a.completedId],
      ['GET', '/trace', a.completedId],
      ['GET', '/events', a.completedId],
      ['GET', '/events?after=999999', a.askingId],
      // Found, a finished workflow's events would be replayed (200) to the stream's end.
      ['GET', '/events?after=0', a.completedId],
      ['HEAD', '/events', a.askingId],
      ['POST', '/stream-token', a.completedId],
    ];
    for (const key of [b.key, b.memberKey]) {
      for (const [method, suffix, id, body] of workflowRoutes) {
        await f.expectUnknown(key, method, (x) => `/v1/workflows/${x}${suffix}`, id, body);
      }
      for (const [method, body] of [['GET'], ['PATCH', { title: 'taken' }], ['DELETE']] as const) {
        await f.expectUnknown(key, method, (x) => `/v1/sessions/${x}`, a.sessionId, body);
      }
      await f.expectUnknown(key, 'GET', (x) => `/v1/sessions/${x}?after=0&limit=5`, a.sessionId);
      await f.expectUnknown(key, 'GET', (x) => `/v1/tools/${x}`, a.toolId);
      await f.expectUnknown(key, 'GET', (x) => `/v1/mcp-servers/${x}`, a.mcpServerId);
    }
    // Admin routes: a member key of B gets 403 whatever the id, so only B's admin key asks.
    await f.expectUnknown(b.key, 'DELETE', (x) => `/v1/tools/${x}`, a.toolId);
    await f.expectUnknown(b.key, 'DELETE', (x) => `/v1/mcp-servers/${x}`, a.mcpServerId);
    for (const body of [{ requiresApproval: true, description: 'taken' }, { headers: {} }, {}]) {
      await f.expectUnknown(b.key, 'PATCH', (x) => `/v1/tools/${x}`, a.toolId, body);
    }
    // With headers, the server's row is read before any connection: found, it would be listed again.
    for (const body of [{ requiresApproval: true, timeoutMs: 500 }, { headers: {} }, {}]) {
      await f.expectUnknown(b.key, 'PATCH', (x) => `/v1/mcp-servers/${x}`, a.mcpServerId, body);
    }
    await f.expectUnknown(b.key, 'GET', (x) => `/v1/api-keys/${x}`, a.memberKeyId);
    await f.expectUnknown(b.key, 'DELETE', (x) => `/v1/api-keys/${x}`, a.memberKeyId);

    expect(await snapshotOfA()).toEqual(before);
  });

  it('a member key of B gets the same 403 on an admin route whatever the id names', async () => {
    const a = f.a();
    const b = f.b();
    const adminRoutes: [string, string, unknown?][] = [
      ['DELETE', `/v1/tools/${a.toolId}`],
      ['DELETE', `/v1/api-keys/${a.memberKeyId}`],
      ['PATCH', `/v1/tools/${a.toolId}`, { requiresApproval: true }],
      ['PATCH', `/v1/mcp-servers/${a.mcpServerId}`, { requiresApproval: true }],
    ];
    for (const [method, path, body] of adminRoutes) {
      const onA = await f.call(b.memberKey, method, path, { body });
      const onNone = await f.call(b.memberKey, method, path.replace(/[^/]+$/, randomUUID()), {
        body,
      });
      expect(onA.status).toBe(403);
      expectSameProblem(onA, onNone, `${method} ${path}`);
    }
  });

  it('B’s cancel of A’s running workflow answers 404 and leaves its run alone: it completes', async () => {
    const a = f.a();
    f.h.provider.enqueue({ kind: 'reply', text: 'still running', firstByteDelayMs: 400 });
    const created = await f.call(a.key, 'POST', '/v1/workflows', {
      body: { input: 'A long one', mode: 'simple' },
    });
    expect(created.status, created.text).toBe(202);
    const id = created.json.id as string;
    await eventStored(f.h.testApp, id, { type: 'llm_call' });
    await f.expectUnknown(f.b().key, 'POST', (x) => `/v1/workflows/${x}/cancel`, id);
    const done = await waitForStatus(f.h.testApp, a.key, id, ['completed', 'failed', 'cancelled']);
    expect(done).toMatchObject({ status: 'completed', result: { reason: 'answered' } });
  });
});

describe('tenant B’s listings', () => {
  it('show nothing of A’s, whatever filter or cursor B passes', async () => {
    const a = f.a();
    const b = f.b();
    f.h.provider.enqueue(answer('B’s own answer.'));
    const mine = await f.call(b.key, 'POST', '/v1/workflows', { body: { input: 'B asks' } });
    expect(mine.status, mine.text).toBe(202);
    await waitForStatus(f.h.testApp, b.key, mine.json.id, ['completed']);
    const pageOfA = await f.call(a.key, 'GET', '/v1/workflows?limit=1');
    const cursorOfA = pageOfA.json.nextCursor as string;
    expect(cursorOfA).toEqual(expect.any(String));
    await createSession(f.h.testApp, a.key, { title: `${A_SECRET} second` });
    const sessionPageOfA = await f.call(a.key, 'GET', '/v1/sessions?limit=1');
    const sessionCursorOfA = sessionPageOfA.json.nextCursor as string;
    expect(sessionCursorOfA).toEqual(expect.any(String));
    const idsOfA = [
      a.completedId,
      a.askingId,
      a.checkpointId,
      a.idempotentId,
      a.sessionId,
      a.toolId,
      a.mcpServerId,
      a.memberKeyId,
    ];
    const listings = [
      '/v1/workflows',
      '/v1/workflows?limit=100',
      `/v1/workflows?sessionId=${a.sessionId}`,
      '/v1/workflows?status=awaiting_input',
      '/v1/workflows?status=completed',
      `/v1/workflows?cursor=${cursorOfA}`,
      '/v1/sessions',
      `/v1/sessions?metadata=${encodeURIComponent('{"user":"alice"}')}`,
      '/v1/sessions?order=activity',
      `/v1/sessions?cursor=${sessionCursorOfA}`,
      `/v1/sessions?limit=100&metadata=${encodeURIComponent('{}')}`,
      '/v1/tools',
      '/v1/mcp-servers',
      '/v1/api-keys',
      '/v1/me',
      '/v1/models',
    ];
    for (const path of listings) {
      const reply = await f.call(b.key, 'GET', path);
      expect(reply.status, `${path}: ${reply.text}`).toBe(200);
      for (const id of [...idsOfA, a.id]) expect(reply.text, path).not.toContain(id);
      for (const name of [A_SECRET, a.toolName, a.mcpServerName, 'alice']) {
        expect(reply.text, path).not.toContain(name);
      }
    }
    const own = await f.call(b.key, 'GET', '/v1/workflows');
    expect(own.json.items.map((item: { id: string }) => item.id)).toEqual([mine.json.id]);
    const filtered = await f.call(b.key, 'GET', `/v1/workflows?sessionId=${a.sessionId}`);
    expect(filtered.json).toEqual({ items: [], nextCursor: null });
  });
});
