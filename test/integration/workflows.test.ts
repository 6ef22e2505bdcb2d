import { beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  countWorkflows,
  createSession,
  getWorkflow,
  postWorkflow,
  startWorkflow,
  storedEvents,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

const { app, newTenant } = useScriptedApp();

describe('creating a workflow', () => {
  it('answers 202 with links, runs the model once and completes with the answer', async () => {
    const tenant = await newTenant('create');
    const response = await postWorkflow(app(), tenant.key, { input: 'What is Waymark?' });
    expect(response.statusCode, response.body).toBe(202);
    const created = response.json();
    expect(created).toEqual({
      id: expect.any(String),
      status: 'queued',
      version: 1,
      links: {
        self: `/v1/workflows/${created.id}`,
        events: `/v1/workflows/${created.id}/events`,
        cancel: `/v1/workflows/${created.id}/cancel`,
      },
    });
    expect(response.headers.location).toBe(`/v1/workflows/${created.id}`);

    const done = await waitForStatus(app(), tenant.key, created.id, ['completed', 'failed']);
    expect(done).toMatchObject({
      id: created.id,
      status: 'completed',
      mode: 'auto',
      model: 'scripted',
      input: 'What is Waymark?',
      awaitingReason: null,
      error: null,
      // queued -> running -> completed
      version: 3,
      startedAt: expect.any(String),
      finishedAt: expect.any(String),
    });
    const answer = (done.result as { answer: string }).answer;
    expect(answer).toMatch(/^\[scripted model\] You asked: "What is Waymark\?"/);
    const usage = done.usage as { inputTokens: number; outputTokens: number };
    expect(usage.inputTokens).toBeGreaterThan(0);
    expect(usage.outputTokens).toBeGreaterThan(0);

    const events = await storedEvents(app(), created.id);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
    expect(done.lastSeq).toBe(events.length);
    expect(events.map((event) => [event.type, event.status])).toEqual([
      ['workflow_start', 'started'],
      ['classification', 'completed'],
      ['llm_call', 'started'],
      ['llm_call', 'completed'],
      ['answer', 'completed'],
      ['usage', 'info'],
      ['workflow_end', 'completed'],
    ]);
    const byType = (type: string, status?: string) =>
      events.find((event) => event.type === type && (!status || event.status === status));
    expect(byType('llm_call', 'started')?.detail).toEqual({
      model: 'scripted',
      turn: 1,
      tools: true,
    });
    expect(byType('llm_call', 'completed')?.elapsed_ms).toEqual(expect.any(Number));
    expect(byType('answer')?.detail).toEqual({ text: answer });
    expect(byType('usage')?.detail).toMatchObject({
      model: 'scripted',
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
    });

    const { rows } = await app().services.database.pool.query(
      'SELECT lease_owner, lease_expires_at FROM workflows WHERE id = $1',
      [created.id],
    );
    expect(rows[0]).toEqual({ lease_owner: null, lease_expires_at: null });
  });

  it('with Accept: text/event-stream answers with the new workflow’s event stream', async () => {
    const tenant = await newTenant('create streaming');
    const response = await postWorkflow(
      app(),
      tenant.key,
      { input: 'Stream it' },
      { accept: 'text/event-stream', 'idempotency-key': 'stream-1' },
    );
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^text\/event-stream/);
    const allFrames = response.body
      .split('\n\n')
      .map((block) =>
        Object.fromEntries(
          block
            .split('\n')
            .map((line) => [line.slice(0, line.indexOf(': ')), line.slice(line.indexOf(': ') + 2)]),
        ),
      );
    const frames = allFrames.filter((frame) => frame.id !== undefined);
    // Subscribed before the run starts: every token chunk of the answer is on the stream.
    const streamedText = allFrames
      .filter((frame) => frame.event === 'token')
      .map((frame) => JSON.parse(frame.data ?? '{}').detail.text)
      .join('');
    expect(frames.map((frame) => Number(frame.id))).toEqual(frames.map((_, index) => index + 1));
    expect(frames[0]?.event).toBe('workflow_start');
    expect(frames.at(-1)?.event).toBe('workflow_end');
    expect(JSON.parse(frames.at(-1)?.data ?? '{}')).toMatchObject({ status: 'completed' });
    const answer = frames.find((frame) => frame.event === 'answer');
    expect(JSON.parse(answer?.data ?? '{}').detail.text).toMatch(/^\[scripted model\]/);
    expect(streamedText).toBe(JSON.parse(answer?.data ?? '{}').detail.text);
    expect(await countWorkflows(app(), tenant.id)).toBe(1);

    // A replay streams the same workflow's events again, and says it is one.
    const replay = await postWorkflow(
      app(),
      tenant.key,
      { input: 'Stream it' },
      { accept: 'text/event-stream', 'idempotency-key': 'stream-1' },
    );
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toContain('event: workflow_end');
    expect(await countWorkflows(app(), tenant.id)).toBe(1);
  });

  it('a wildcard Accept gets the JSON answer', async () => {
    const tenant = await newTenant('create wildcard');
    const response = await postWorkflow(app(), tenant.key, { input: 'hi' }, { accept: '*/*' });
    expect(response.statusCode).toBe(202);
    expect(response.json().status).toBe('queued');
  });

  it('uses the requested model, else the tenant default', async () => {
    const tenant = await newTenant('defaults', { defaultModel: 'slow' });
    const requested = await startWorkflow(app(), tenant.key, {
      input: 'quick one',
      model: 'scripted',
    });
    expect((await getWorkflow(app(), tenant.key, requested)).model).toBe('scripted');
    const defaulted = await startWorkflow(app(), tenant.key, { input: 'default one' });
    expect((await getWorkflow(app(), tenant.key, defaulted)).model).toBe('slow');
  });

  it('keeps sessionId, mode, tools and metadata', async () => {
    const tenant = await newTenant('fields');
    const sessionId = await createSession(app(), tenant.key);
    const id = await startWorkflow(app(), tenant.key, {
      input: 'hello',
      sessionId,
      mode: 'simple',
      tools: ['calculator'],
      metadata: { origin: 'test', nested: { n: 1 } },
    });
    expect(await getWorkflow(app(), tenant.key, id)).toMatchObject({
      sessionId,
      mode: 'simple',
      tools: ['calculator'],
      metadata: { origin: 'test', nested: { n: 1 } },
    });
  });
});

describe('validation', () => {
  let tenant: TestTenant;
  beforeAll(async () => {
    tenant = await newTenant('validation', { allowedModels: ['scripted'] });
  });

  it.each([
    ['no input', {}],
    ['an empty input', { input: '' }],
    ['a blank input', { input: '   \n' }],
    ['an input over 100,000 characters', { input: 'x'.repeat(100_001) }],
    ['a NUL in the input', { input: 'a\u0000b' }],
    ['an unknown mode', { input: 'hi', mode: 'fast' }],
    ['an unknown field', { input: 'hi', priority: 1 }],
    ['metadata over 16 KiB', { input: 'hi', metadata: { blob: 'x'.repeat(16 * 1024) } }],
    ['a NUL in metadata', { input: 'hi', metadata: { note: 'a\u0000b' } }],
    ['metadata that is not an object', { input: 'hi', metadata: ['a'] }],
    ['tools that are not names', { input: 'hi', tools: ['no spaces please'] }],
  ])('%s answers 400 validation_failed and leaves no row', async (_, payload) => {
    const response = await postWorkflow(app(), tenant.key, payload);
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json().code).toBe('validation_failed');
    expect(await countWorkflows(app(), tenant.id)).toBe(0);
  });

  it('an unknown model or one the tenant may not use answers 400 and leaves no row', async () => {
    const unknown = await postWorkflow(app(), tenant.key, { input: 'hi', model: 'gpt-99' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().code).toBe('unknown_model');
    const forbidden = await postWorkflow(
      app(),
      tenant.key,
      { input: 'hi', model: 'slow' },
      { 'idempotency-key': 'not-allowed-model' },
    );
    expect(forbidden.statusCode).toBe(400);
    expect(forbidden.json()).toMatchObject({ code: 'model_not_allowed' });
    expect(await countWorkflows(app(), tenant.id)).toBe(0);
    // The key of a refused request is still free.
    const retried = await postWorkflow(
      app(),
      tenant.key,
      { input: 'hi' },
      { 'idempotency-key': 'not-allowed-model' },
    );
    expect(retried.statusCode).toBe(202);
  });

  it('a malformed Idempotency-Key answers 400', async () => {
    const response = await postWorkflow(
      app(),
      tenant.key,
      { input: 'hi' },
      { 'idempotency-key': 'has spaces' },
    );
    expect(response.statusCode).toBe(400);
    expect(response.json().errors[0].field).toBe('headers.idempotency-key');
  });
});

describe('idempotent create', () => {
  it('the same key and body twice: one workflow; the repeat answers 200 Idempotent-Replayed', async () => {
    const tenant = await newTenant('idempotent');
    const headers = { 'idempotency-key': 'order-42' };
    const body = { input: 'once only', metadata: { a: 1, b: 2 }, mode: 'auto' };
    const first = await postWorkflow(app(), tenant.key, body, headers);
    expect(first.statusCode).toBe(202);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    // Same request: key order and a spelled-out default do not make it another one.
    const again = await postWorkflow(
      app(),
      tenant.key,
      { metadata: { b: 2, a: 1 }, input: 'once only' },
      headers,
    );
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json().id).toBe(first.json().id);
    expect(await countWorkflows(app(), tenant.id)).toBe(1);
  });

  it('the same key with a different body answers 409 idempotency_key_reused', async () => {
    const tenant = await newTenant('reused key');
    const headers = { 'idempotency-key': 'k-1' };
    expect((await postWorkflow(app(), tenant.key, { input: 'first' }, headers)).statusCode).toBe(
      202,
    );
    const different = await postWorkflow(app(), tenant.key, { input: 'second' }, headers);
    expect(different.statusCode).toBe(409);
    expect(different.json().code).toBe('idempotency_key_reused');
    expect(await countWorkflows(app(), tenant.id)).toBe(1);
  });

  it('10 concurrent creates with one key make exactly one workflow', async () => {
    const tenant = await newTenant('concurrent key');
    const responses = await Promise.all(
      Array.from({ length: 10 }, () =>
        postWorkflow(app(), tenant.key, { input: 'race' }, { 'idempotency-key': 'race-1' }),
      ),
    );
    const statuses = responses.map((response) => response.statusCode).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 202]);
    expect(new Set(responses.map((response) => response.json().id)).size).toBe(1);
    expect(await countWorkflows(app(), tenant.id)).toBe(1);
    // Only the one created is run.
    const id = responses[0]?.json().id as string;
    await waitForStatus(app(), tenant.key, id, ['completed']);
    const starts = (await storedEvents(app(), id)).filter(
      (event) => event.type === 'workflow_start',
    );
    expect(starts).toHaveLength(1);
  });

  it('a retry answers with the workflow the key made even when the request would be refused now (its model no longer allowed)', async () => {
    const tenant = await newTenant('changed since', { allowedModels: ['scripted', 'slow'] });
    const headers = { 'idempotency-key': 'before-the-change' };
    const body = { input: 'slowly', model: 'slow' };
    const first = await postWorkflow(app(), tenant.key, body, headers);
    expect(first.statusCode, first.body).toBe(202);
    await app().services.tenancy.updateTenant(tenant.id, { allowedModels: ['scripted'] });
    // A request without the key is refused now...
    const fresh = await postWorkflow(app(), tenant.key, body);
    expect(fresh.json().code).toBe('model_not_allowed');
    // ...while the retry of the accepted one answers as it did.
    const retried = await postWorkflow(app(), tenant.key, body, headers);
    expect(retried.statusCode, retried.body).toBe(200);
    expect(retried.headers['idempotent-replayed']).toBe('true');
    expect(retried.json().id).toBe(first.json().id);
    // A new key for the same request is a new request, and refused.
    const other = await postWorkflow(app(), tenant.key, body, { 'idempotency-key': 'after' });
    expect(other.json().code).toBe('model_not_allowed');
    await app().app.inject({
      method: 'POST',
      url: `/v1/workflows/${first.json().id}/cancel`,
      headers: bearer(tenant.key),
    });
  });

  it('keys are per tenant: another tenant’s same key makes its own workflow', async () => {
    const a = await newTenant('key owner a');
    const b = await newTenant('key owner b');
    const headers = { 'idempotency-key': 'shared-name' };
    const fromA = await postWorkflow(app(), a.key, { input: 'same' }, headers);
    const fromB = await postWorkflow(app(), b.key, { input: 'same' }, headers);
    expect([fromA.statusCode, fromB.statusCode]).toEqual([202, 202]);
    expect(fromA.json().id).not.toBe(fromB.json().id);
  });
});

describe('tenant isolation', () => {
  it('another tenant’s workflow answers 404 on read and cancel', async () => {
    const owner = await newTenant('owner');
    const stranger = await newTenant('stranger');
    const id = await startWorkflow(app(), owner.key, { input: 'private' });
    for (const [method, url] of [
      ['GET', `/v1/workflows/${id}`],
      ['POST', `/v1/workflows/${id}/cancel`],
    ] as const) {
      const response = await app().app.inject({ method, url, headers: bearer(stranger.key) });
      expect(response.statusCode, `${method} ${url}`).toBe(404);
      expect(response.json().code).toBe('not_found');
    }
    const unknown = await app().app.inject({
      method: 'GET',
      url: `/v1/workflows/${crypto.randomUUID()}`,
      headers: bearer(owner.key),
    });
    expect(unknown.statusCode).toBe(404);
    await waitForStatus(app(), owner.key, id, ['completed']);
  });

  it('the workflow routes need an API key', async () => {
    for (const [method, url] of [
      ['POST', '/v1/workflows'],
      ['GET', '/v1/workflows'],
      ['GET', `/v1/workflows/${crypto.randomUUID()}`],
      ['POST', `/v1/workflows/${crypto.randomUUID()}/cancel`],
    ] as const) {
      expect((await app().app.inject({ method, url })).statusCode, `${method} ${url}`).toBe(401);
    }
  });
});
