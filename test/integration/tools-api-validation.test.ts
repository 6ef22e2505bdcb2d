import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import { toolsApiHelpers } from '../support/tools-api.js';
import { bootstrapOperator } from '../support/workflows.js';

/**
 * What registering an HTTP tool refuses: malformed fields, and hosts or
 * private addresses the settings do not allow. The local tool server is on
 * 127.0.0.1, a private address: the main app allows private addresses;
 * `strict` (same database) keeps the default, and `allowlisted` only allows
 * *.example.com and tools.internal.
 */
let testApp: TestApp;
let strict: TestApp;
let allowlisted: TestApp;
let server: ToolServer;
let adminKey: string;

beforeAll(async () => {
  server = await startToolServer();
  testApp = await startTestApp({ HTTP_TOOLS_ALLOW_PRIVATE: 'true' });
  strict = await startTestAppOn(testApp.database);
  allowlisted = await startTestAppOn(testApp.database, {
    HTTP_TOOLS_ALLOWED_HOSTS: '*.example.com, tools.internal',
  });
  adminKey = await bootstrapOperator(testApp);
});
afterAll(async () => {
  await allowlisted?.close();
  await strict?.close();
  await testApp?.close();
  await server?.close();
});

const { toolBody, createTool } = toolsApiHelpers(() => ({ testApp, server, adminKey }));

describe('validation of a new HTTP tool', () => {
  it.each([
    ['starts with a digit', '1tool'],
    ['has a space', 'my tool'],
    ['has a dot', 'my.tool'],
    ['is longer than 64 characters', `t${'x'.repeat(64)}`],
    ['is empty', ''],
    ['looks like an MCP server’s tool (server__tool)', 'weather__forecast'],
  ])('a name that %s is a 400 naming body.name', async (_what, name) => {
    const response = await createTool(toolBody({ name }));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ code: 'validation_failed' });
    expect(response.json().errors.map((error: { field: string }) => error.field)).toContain(
      'body.name',
    );
  });

  it.each(['ask_user', 'current_time', 'calculator', 'http_fetch'])(
    'the name of the built-in %s is refused',
    async (name) => {
      const response = await createTool(toolBody({ name }));
      expect(response.statusCode).toBe(400);
      expect(response.json()).toMatchObject({
        code: 'reserved_tool_name',
        errors: [{ field: 'body.name' }],
      });
    },
  );

  it.each([
    ['a root that is not an object schema', { type: 'string' }],
    ['a root without a type', { properties: { a: { type: 'string' } } }],
    ['properties that are not schemas', { type: 'object', properties: 3 }],
    ['required that is not a list', { type: 'object', required: 'city' }],
    ['an unknown type', { type: 'object', properties: { a: { type: 'strin' } } }],
    ['a bad regular expression', { type: 'object', properties: { a: { pattern: '(' } } }],
    ['an unresolvable $ref', { type: 'object', properties: { a: { $ref: '#/$defs/missing' } } }],
    ['a draft-4 id', { type: 'object', properties: { a: { type: 'string', id: 'a' } } }],
    ['a malformed $defs entry', { type: 'object', $defs: { a: { type: 'strin' } } }],
  ])('parameters with %s are a 400', async (_what, parameters) => {
    const response = await createTool(toolBody({ parameters }));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({
      code: 'invalid_parameters_schema',
      errors: [{ field: 'body.parameters' }],
    });
  });

  it('parameters that are not an object at all fail validation', async () => {
    const response = await createTool(toolBody({ parameters: ['a'] }));
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('validation_failed');
  });

  it.each([
    ['not a URL', 'weather'],
    ['an ftp URL', 'ftp://tools.example.com/x'],
    ['a javascript URL', 'javascript:alert(1)'],
  ])('a url that is %s fails validation', async (_what, url) => {
    const response = await createTool(toolBody({ url }));
    expect(response.statusCode).toBe(400);
    expect(response.json().errors.map((error: { field: string }) => error.field)).toContain(
      'body.url',
    );
  });

  it('a url with credentials is refused: listings show the URL', async () => {
    const response = await createTool(toolBody({ url: 'https://user:pw@tools.example.com/x' }));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ code: 'invalid_url', errors: [{ field: 'body.url' }] });
  });

  it.each([
    ['Content-Type', 'text/plain'],
    ['idempotency-key', 'x'],
    ['Host', 'evil.example'],
    ['X-Bad', 'line\r\nInjected: yes'],
    ['Bad Name', 'x'],
  ])('the header %s: %j is refused', async (name, value) => {
    const response = await createTool(toolBody({ headers: { [name]: value } }));
    expect(response.statusCode).toBe(400);
    expect(response.json().code).toBe('validation_failed');
  });

  it.each([99, 120_001, 1.5])('timeoutMs %d is refused', async (timeoutMs) => {
    const response = await createTool(toolBody({ timeoutMs }));
    expect(response.statusCode).toBe(400);
    expect(response.json().errors[0].field).toBe('body.timeoutMs');
  });

  it('unknown fields are refused', async () => {
    const response = await createTool(toolBody({ method: 'GET' }));
    expect(response.statusCode).toBe(400);
  });
});

describe('allowed hosts and private addresses at registration', () => {
  it('a host outside HTTP_TOOLS_ALLOWED_HOSTS is a 400 host_not_allowed', async () => {
    for (const url of [
      'https://example.com/x',
      'https://evil.com/x',
      'https://example.com.evil.com/',
    ]) {
      const response = await createTool(toolBody({ url }), { app: allowlisted });
      expect(response.statusCode, url).toBe(400);
      expect(response.json(), url).toMatchObject({
        code: 'host_not_allowed',
        errors: [{ field: 'body.url' }],
      });
    }
  });

  it('an allowed host or subdomain is accepted', async () => {
    for (const url of [
      'https://api.example.com/x',
      'https://a.b.example.com/x',
      'http://tools.internal:8080/',
    ]) {
      const response = await createTool(toolBody({ url }), { app: allowlisted });
      expect(response.statusCode, url).toBe(201);
    }
  });

  it.each([
    'http://127.0.0.1:9000/x',
    'http://10.1.2.3/x',
    'http://192.168.0.10/x',
    'http://169.254.169.254/latest/meta-data',
    'http://[::1]:9000/x',
    'http://[::ffff:127.0.0.1]/x',
    'http://localhost:9000/x',
  ])('%s is refused unless HTTP_TOOLS_ALLOW_PRIVATE is set', async (url) => {
    const refused = await createTool(toolBody({ url }), { app: strict });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toMatchObject({
      code: 'private_address',
      errors: [{ field: 'body.url' }],
    });
    expect((await createTool(toolBody({ url }))).statusCode).toBe(201);
  });
});

describe('validation of a change (PATCH /v1/tools/:id): as at registration, and nothing is changed', () => {
  /**
   * Registers a tool at `url` on `app` (allowed by its settings), asks there
   * for `changes`, expects a 400 and the tool unchanged; returns the problem.
   */
  async function refusedChange(
    changes: Record<string, unknown>,
    options: { app?: TestApp; url?: string } = {},
  ) {
    const app = options.app ?? testApp;
    const url = options.url ?? `${server.origin}/weather`;
    const tool = (await createTool(toolBody({ url }), { app })).json();
    const inject = (method: 'PATCH' | 'GET', payload?: Record<string, unknown>) =>
      app.app.inject({
        method,
        url: `/v1/tools/${tool.id}`,
        headers: { authorization: `Bearer ${adminKey}` },
        ...(payload === undefined ? {} : { payload }),
      });
    const refused = await inject('PATCH', changes);
    expect(refused.statusCode, refused.body).toBe(400);
    expect((await inject('GET')).json()).toEqual(tool);
    return refused.json();
  }

  it.each([
    ['a name (workflows name their tools by it)', { name: 'renamed' }, 'validation_failed', 'body'],
    ['an empty description', { description: '  ' }, 'validation_failed', 'body.description'],
    [
      'parameters that are not an object schema',
      { parameters: { type: 'string' } },
      'invalid_parameters_schema',
      'body.parameters',
    ],
    [
      'parameters with an unknown type',
      { parameters: { type: 'object', properties: { a: { type: 'strin' } } } },
      'invalid_parameters_schema',
      'body.parameters',
    ],
    [
      'a url that is not http',
      { url: 'ftp://tools.example.com/x' },
      'validation_failed',
      'body.url',
    ],
    [
      'a url with credentials',
      { url: 'https://user:pw@tools.example.com/x' },
      'invalid_url',
      'body.url',
    ],
    [
      'a header the service sets',
      { headers: { 'Idempotency-Key': 'x' } },
      'validation_failed',
      'body.headers',
    ],
    [
      'a header value with a line break',
      { headers: { 'X-Bad': 'a\r\nInjected: yes' } },
      'validation_failed',
      'body.headers.X-Bad',
    ],
    ['a timeout under 100 ms', { timeoutMs: 99 }, 'validation_failed', 'body.timeoutMs'],
    ['null for a field', { description: null }, 'validation_failed', 'body.description'],
    ['an unknown field', { method: 'GET' }, 'validation_failed', 'body'],
  ])('%s is a 400 %s', async (_what, changes, code, field) => {
    const problem = await refusedChange(changes);
    expect(problem.code).toBe(code);
    expect(problem.errors.map((error: { field: string }) => error.field)).toContain(field);
  });

  it('a url whose host is not allowed is a 400 host_not_allowed', async () => {
    const problem = await refusedChange(
      { url: 'https://example.com.evil.com/x' },
      { app: allowlisted, url: 'https://api.example.com/x' },
    );
    expect(problem).toMatchObject({ code: 'host_not_allowed', errors: [{ field: 'body.url' }] });
  });

  it.each([
    'http://127.0.0.1:9000/x',
    'http://169.254.169.254/latest/meta-data',
    'http://[::1]:9000/x',
    'http://localhost:9000/x',
  ])('%s is a 400 private_address unless HTTP_TOOLS_ALLOW_PRIVATE is set', async (url) => {
    const problem = await refusedChange(
      { url },
      { app: strict, url: 'https://tools.example.com/x' },
    );
    expect(problem).toMatchObject({ code: 'private_address', errors: [{ field: 'body.url' }] });
  });
});
