import { once } from 'node:events';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../../src/json-limits.js';
import { bearer, listenLocally, startTestApp, type TestApp } from '../support/app.js';
import { expectProblem } from '../support/problems.js';

/**
 * Input that passed the schemas or never reached them and got a 500, a
 * plain-JSON error or worse (found by sending hostile requests to a running
 * service): each is now a 4xx problem+json with a stable code, and nothing
 * is written.
 */

let testApp: TestApp;
let adminKey: string;
let tenantId: string;

beforeAll(async () => {
  testApp = await startTestApp();
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
  tenantId = created.tenant.id;
});
afterAll(async () => testApp?.close());

function postJson(url: string, payload: string) {
  return testApp.app.inject({
    method: 'POST',
    url,
    headers: { ...bearer(adminKey), 'content-type': 'application/json' },
    payload,
  });
}

async function workflowCount(): Promise<number> {
  const rows = await testApp.services.database.db
    .selectFrom('workflows')
    .select('id')
    .where('tenant_id', '=', tenantId)
    .execute();
  return rows.length;
}

describe('text that is not valid Unicode: 400 invalid_unicode, nothing written', () => {
  it('a lone surrogate escape in a workflow’s input or metadata, or a metadata key', async () => {
    const before = await workflowCount();
    for (const [payload, field] of [
      ['{"input":"a\\ud800b"}', 'body.input'],
      ['{"input":"hi","metadata":{"a":"\\udfff"}}', 'body.metadata.a'],
      ['{"input":"hi","metadata":{"list":["ok",{"\\ud800":1}]}}', 'body.metadata.list.1.\ud800'],
    ] as const) {
      const body = expectProblem(await postJson('/v1/workflows', payload), 400, 'invalid_unicode');
      expect(body.errors, payload).toEqual([expect.objectContaining({ field })]);
    }
    expect(await workflowCount()).toBe(before);
  });

  it('the same in a session, an answer or an API key’s name; a surrogate pair is fine', async () => {
    expectProblem(
      await postJson('/v1/sessions', '{"metadata":{"x":"\\ud800"}}'),
      400,
      'invalid_unicode',
    );
    const answered = await postJson(
      `/v1/workflows/${crypto.randomUUID()}/answer`,
      '{"answer":"\\ud800"}',
    );
    expectProblem(answered, 400, 'invalid_unicode');
    const paired = await postJson('/v1/api-keys', '{"name":"ci \\ud83d\\ude00"}');
    expect(paired.statusCode).toBe(201);
    expect((paired.json() as { name: string }).name).toBe('ci 😀');
  });
});

describe('bodies nested deeper than the API reads: 400 json_too_deep', () => {
  const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

  it('4,500 levels of metadata (a stack overflow, a 500, before)', async () => {
    const before = await workflowCount();
    const response = await postJson(
      '/v1/workflows',
      `{"input":"hi","metadata":{"a":${nested(4_500)}}}`,
    );
    const body = expectProblem(response, 400, 'json_too_deep');
    expect(body.errors).toEqual([
      expect.objectContaining({ field: expect.stringMatching(/^body\.metadata\.a\.0\.0/) }),
    ]);
    expect(await workflowCount()).toBe(before);
  });

  it('the limit counts the body itself: one level less reaches the schema', async () => {
    // The body is level 1, metadata 2, its value 3.
    const deepest = `{"input":"hi","metadata":{"a":${nested(MAX_JSON_DEPTH - 2)}}}`;
    const refused = `{"input":"hi","metadata":{"a":${nested(MAX_JSON_DEPTH - 1)}}}`;
    expectProblem(await postJson('/v1/api-keys', refused), 400, 'json_too_deep');
    // api-keys takes no such fields: the schema refuses it, not the depth.
    expectProblem(await postJson('/v1/api-keys', deepest), 400, 'validation_failed');
  });
});

describe('numbers and strings that reach PostgreSQL out of its range', () => {
  it('a version past PostgreSQL’s integer: 400 validation_failed (out of range in the query, before)', async () => {
    for (const action of ['continue', 'retry', 'answer']) {
      const payload =
        action === 'answer' ? '{"answer":"yes","version":2147483648}' : '{"version":2147483648}';
      const response = await postJson(`/v1/workflows/${crypto.randomUUID()}/${action}`, payload);
      const body = expectProblem(response, 400, 'validation_failed');
      expect(body.errors, action).toEqual([expect.objectContaining({ field: 'body.version' })]);
    }
  });

  it('a NUL in the sessionId filter: 400 validation_failed', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/workflows?sessionId=%00',
      headers: bearer(adminKey),
    });
    const body = expectProblem(response, 400, 'validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'query.sessionId' })]);
  });

  it('a forged cursor past the timestamps PostgreSQL can add: 400 invalid_cursor', async () => {
    for (const micros of ['9999999999999999999', '10000000000000000']) {
      const cursor = Buffer.from(`${micros}.5e0fe70c-fac6-47f9-a362-030ad8f25e22`).toString(
        'base64url',
      );
      const response = await testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows?cursor=${cursor}`,
        headers: bearer(adminKey),
      });
      expectProblem(response, 400, 'invalid_cursor');
    }
  });
});

describe('refusals that say what is wrong', () => {
  it('a __proto__ key: 400 forbidden_json_key, not "not valid JSON"', async () => {
    const response = await postJson('/v1/api-keys', '{"name":"x","__proto__":{"admin":true}}');
    expectProblem(response, 400, 'forbidden_json_key');
  });

  it('a body in a charset other than UTF-8: 415, not misread', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...bearer(adminKey), 'content-type': 'application/json; charset=utf-16' },
      payload: '{"name":"x"}',
    });
    expectProblem(response, 415, 'unsupported_media_type');
    const utf8 = await testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...bearer(adminKey), 'content-type': 'application/json; charset=UTF-8' },
      payload: '{"name":"x"}',
    });
    expect(utf8.statusCode).toBe(201);
  });

  it('a modify plan with a key it does not take: 400, not silently dropped', async () => {
    const response = await postJson(
      `/v1/workflows/${crypto.randomUUID()}/modify`,
      JSON.stringify({ feedback: 'shorter', plan: { stages: [{}], checkpoints: 'all' } }),
    );
    const body = expectProblem(response, 400, 'validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'body.plan' })]);
  });

  it('a modify plan with a NUL character: 400, not a 500 at the plan’s write', async () => {
    const response = await postJson(
      `/v1/workflows/${crypto.randomUUID()}/modify`,
      JSON.stringify({ feedback: 'shorter', plan: { stages: [{ title: 'a\u0000b' }] } }),
    );
    const body = expectProblem(response, 400, 'validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'body.plan' })]);
  });

  it('a garbage Last-Event-ID is one problem, not two', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${crypto.randomUUID()}/events`,
      headers: { ...bearer(adminKey), 'last-event-id': 'abc' },
    });
    const body = expectProblem(response, 400, 'validation_failed');
    expect(body.errors).toEqual([
      { field: 'headers.last-event-id', message: 'expected the seq of an event' },
    ]);
  });

  it('If-Match: "0" is refused as body version 0 is; If-Match: * matches any version', async () => {
    const url = `/v1/workflows/${crypto.randomUUID()}/continue`;
    const send = (ifMatch: string) =>
      testApp.app.inject({
        method: 'POST',
        url,
        headers: { ...bearer(adminKey), 'if-match': ifMatch },
      });
    expectProblem(await send('"0"'), 400, 'invalid_if_match');
    // Past the version check: the workflow is looked up (and is unknown).
    expectProblem(await send('*'), 404, 'not_found');
  });

  it('an MCP server name with "__" or a trailing "_" (its tools’ names could collide with another server’s): 400', async () => {
    for (const name of ['a__b', 'calc_']) {
      const response = await postJson(
        '/v1/mcp-servers',
        JSON.stringify({ name, url: 'https://mcp.example.com/mcp' }),
      );
      const body = expectProblem(response, 400, 'validation_failed');
      expect(body.errors, name).toEqual([expect.objectContaining({ field: 'body.name' })]);
    }
  });
});

describe('what Fastify’s router refuses is problem+json too', () => {
  it('a path that is not valid percent-encoding: 400 invalid_url', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/workflows/%zz',
      headers: bearer(adminKey),
    });
    expectProblem(response, 400, 'invalid_url');
  });

  it('a path parameter of 5,000 characters: 414 path_parameter_too_long', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${'x'.repeat(5_000)}`,
      headers: bearer(adminKey),
    });
    expectProblem(response, 414, 'path_parameter_too_long');
  });
});

describe('requests Node’s HTTP parser refuses, over a real socket', () => {
  let port: number;
  beforeAll(async () => {
    ({ port } = await listenLocally(testApp.app));
  });

  /** Writes `request` as bytes and reads the whole answer (the server closes the connection). */
  async function raw(request: string): Promise<{ status: number; headers: string; body: string }> {
    const socket = net.connect(port, '127.0.0.1');
    await once(socket, 'connect');
    socket.write(request);
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    await once(socket, 'close');
    const text = Buffer.concat(chunks).toString('utf8');
    const [head = '', body = ''] = text.split('\r\n\r\n');
    return { status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body };
  }

  function expectRawProblem(
    answer: { status: number; headers: string; body: string },
    status: number,
    code: string,
  ) {
    expect(answer.status).toBe(status);
    expect(answer.headers).toContain('content-type: application/problem+json');
    const problem = JSON.parse(answer.body) as Record<string, unknown>;
    expect(problem).toMatchObject({ status, code, type: `urn:waymark:problem:${code}` });
    expect(answer.headers).toContain(`x-request-id: ${String(problem.requestId).toLowerCase()}`);
  }

  it('a Content-Length that is not a number: 400 invalid_content_length', async () => {
    for (const length of ['abc', '-1']) {
      const answer = await raw(
        `POST /v1/workflows HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n{}`,
      );
      expectRawProblem(answer, 400, 'invalid_content_length');
    }
  });

  it('headers over the size limit: 431 headers_too_large', async () => {
    const answer = await raw(
      `GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expectRawProblem(answer, 431, 'headers_too_large');
  });

  it('bytes that are not HTTP: 400 malformed_request', async () => {
    const answer = await raw('HELLO THERE\r\n\r\n');
    expectRawProblem(answer, 400, 'malformed_request');
  });
});
