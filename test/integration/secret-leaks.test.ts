import type { IncomingMessage, ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { configuredSecrets, createLogSecrets } from '../../src/log-secrets.js';
import { createLogger } from '../../src/logger.js';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer, FakeResponse } from '../fakes/provider-types.js';
import { bearer, startTestAppOn, type TestApp } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  type RawMcpServer,
  type RawRpc,
  replyResult,
  startRawMcpServer,
} from '../support/raw-mcp-server.js';
import { startToolServer, type ToolServer } from '../support/tool-server.js';
import {
  bootstrapOperator,
  createTenant,
  startWorkflow,
  storedEvents,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

/**
 * Secrets never leave the process by the way of its output: provider keys,
 * the header values stored with HTTP tools and MCP servers, API keys and
 * stream tokens are in no log line (the production logger, at trace), no
 * API answer, no workflow event and no prompt sent to a model, on the
 * paths where they are most likely to slip out: failures. (The database
 * password: test/e2e/database-password-leaks.test.ts.) A server
 * that quotes its own credentials back (an echo endpoint, an error page
 * showing the request, "invalid token: …") must not hand them to the model.
 */

const OPENAI_KEY = 'sk-openai-leak-check-1111';
const ANTHROPIC_KEY = 'sk-ant-leak-check-2222';
const TOOL_TOKEN = 'tool-token-leak-check-3333';
const TOOL_API_KEY = 'tool-apikey-leak-check-4444';
const MCP_TOKEN = 'mcp-token-leak-check-5555';
const SECRETS = [OPENAI_KEY, ANTHROPIC_KEY, TOOL_TOKEN, TOOL_API_KEY, MCP_TOKEN];

/** What the production logger wrote, every level. */
let logged = '';
const logSink = new Writable({
  write(chunk, _encoding, done) {
    logged += String(chunk);
    done();
  },
});

let database: TestDatabase;
let provider: FakeProviderServer;
let tools: ToolServer;
let mcp: RawMcpServer;
/** How the MCP server answers: well; `initialize` refused quoting the token; `tools/call` quoting it. */
let mcpMode: 'normal' | 'refuse-quoting' | 'result-quoting' = 'normal';
let testApp: TestApp;
let tenant: TestTenant;
/** The test app's environment. */
let env: Record<string, string>;

beforeAll(async () => {
  database = await createTestDatabase();
  provider = await startFakeProviderServer();
  tools = await startToolServer();
  tools.handle(answerToolCall);
  mcp = await startRawMcpServer(answerMcp);
  env = {
    LOG_LEVEL: 'trace',
    OAI_KEY: OPENAI_KEY,
    ANT_KEY: ANTHROPIC_KEY,
    HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    LLM_MAX_RETRIES_PER_MODEL: '0',
    LLM_BREAKER_THRESHOLD: '100',
    RATE_LIMIT_MAX: '100000',
    WAYMARK_MODELS: JSON.stringify({
      providers: [
        { name: 'oai', kind: 'openai', baseUrl: provider.openaiBaseUrl, apiKeyEnv: 'OAI_KEY' },
        {
          name: 'ant',
          kind: 'anthropic',
          baseUrl: provider.anthropicBaseUrl,
          apiKeyEnv: 'ANT_KEY',
        },
      ],
      models: [{ ...model('gpt', 'oai'), fallbacks: ['claude'] }, model('claude', 'ant')],
      defaultModel: 'gpt',
    }),
  };
  testApp = await startTestAppOn(database, env, productionLogger(env));
  tenant = await createTenant(testApp, await bootstrapOperator(testApp), { name: 'secretive' });
});
afterAll(async () => {
  await testApp?.close();
  await database?.drop();
  await provider?.close();
  await tools?.close();
  await mcp?.close();
});

/** The logger main.ts makes for `env`, at trace, writing to `logged`. */
function productionLogger(environment: Record<string, string>) {
  const secrets = createLogSecrets(configuredSecrets(loadConfig(environment), environment));
  return createLogger({ LOG_LEVEL: 'trace' }, { destination: logSink, secrets });
}

function model(name: string, providerName: string) {
  return {
    name,
    provider: providerName,
    modelId: `${name}-id`,
    contextWindow: 32_000,
    maxOutputTokens: 256,
  };
}

/** `/quote-500` fails quoting the request's headers, as a debugging error page does; `/echo` answers them, as httpbin does. */
function answerToolCall(call: { path: string; headers: object }, response: ServerResponse): void {
  const quoted = JSON.stringify({ received: call.headers });
  if (call.path === '/quote-500') {
    response.writeHead(500, { 'content-type': 'text/plain' });
    response.end(`internal error handling request ${quoted}`);
    return;
  }
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(quoted);
}

function answerMcp(message: RawRpc, response: ServerResponse, request: IncomingMessage): void {
  const authorization = String(request.headers.authorization);
  if (message.method === 'initialize' && mcpMode === 'refuse-quoting') {
    response.writeHead(401, { 'content-type': 'text/plain' });
    response.end(`invalid token: ${authorization}`);
    return;
  }
  if (message.method === 'initialize') {
    replyResult(response, message.id, INITIALIZE_RESULT);
  } else if (message.id === undefined) {
    acceptNotification(response);
  } else if (message.method === 'tools/list') {
    // A listing generated per caller, its description and schema quoting the credentials.
    const as = { type: 'string', description: `defaults to ${authorization}` };
    replyResult(response, message.id, {
      tools: [
        {
          name: 'whoami',
          description: `Who holds ${authorization}`,
          inputSchema: { type: 'object', properties: { as } },
        },
        // Refused by the protocol's schema: skipped, named in the log.
        { name: `for ${authorization}`, inputSchema: { type: 'string' } },
      ],
    });
  } else {
    replyResult(response, message.id, {
      content: [
        { type: 'text', text: `you are the holder of ${authorization.replace(/^Bearer /, '')}` },
      ],
    });
  }
}

/** OpenAI's error body, its message quoting what it likes (OpenAI's 401 quotes the key it was sent). */
function openAiError(message: string) {
  return {
    error: { message, type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
  };
}

/** Anthropic's error body, its message quoting what it likes. */
function anthropicError(message: string) {
  return { type: 'error', error: { type: 'api_error', message } };
}

/** Fails naming the first of `secrets` (every one unless given) that `text`, what `what` says, holds. */
function expectNoSecretIn(what: string, text: string, secrets: readonly string[] = SECRETS): void {
  for (const secret of secrets) expect(text, `${what} holds ${secret}`).not.toContain(secret);
}

function promptsSince(first: number): string {
  return JSON.stringify(provider.requests.slice(first).map((request) => request.body));
}

async function registerTool(name: string, toolPath: string): Promise<void> {
  const response = await testApp.app.inject({
    method: 'POST',
    url: '/v1/tools',
    headers: bearer(tenant.key),
    payload: {
      name,
      description: 'A tool whose server needs credentials',
      parameters: { type: 'object', properties: {} },
      url: `${tools.origin}${toolPath}`,
      headers: { Authorization: `Bearer ${TOOL_TOKEN}`, 'X-Api-Key': TOOL_API_KEY },
    },
  });
  expect(response.statusCode, response.body).toBe(201);
  expectNoSecretIn('the registration’s answer', response.body);
}

async function runToEnd(input: string, ...replies: FakeResponse[]) {
  provider.enqueue(...replies);
  const id = await startWorkflow(testApp, tenant.key, { input, mode: 'simple' });
  const workflow = await waitForStatus(testApp, tenant.key, id, ['completed', 'failed']);
  return { id, workflow, events: await storedEvents(testApp, id) };
}

describe('secrets stay out of logs, answers, events and prompts', () => {
  it('an HTTP tool’s header values: not listed, and a server quoting them (in a 500, in an echo) reaches neither the model nor the log', async () => {
    await registerTool('quoting_failure', '/quote-500');
    await registerTool('echo', '/echo');
    const listing = await testApp.app.inject({
      method: 'GET',
      url: '/v1/tools',
      headers: bearer(tenant.key),
    });
    expectNoSecretIn('the tool listing', listing.body);
    const first = provider.requests.length;
    const { workflow, events } = await runToEnd(
      'Use both tools',
      {
        kind: 'reply',
        toolCalls: [
          { id: 'call_failing', name: 'quoting_failure', arguments: {} },
          { id: 'call_echo', name: 'echo', arguments: {} },
        ],
      },
      { kind: 'reply', text: 'Both answered.' },
    );
    expect(workflow.status, JSON.stringify(workflow.error)).toBe('completed');
    // The servers did get the headers, and did quote them.
    expect(tools.calls.at(-1)?.headers.authorization).toBe(`Bearer ${TOOL_TOKEN}`);
    const prompts = promptsSince(first);
    expectNoSecretIn('the prompts', prompts);
    expect(prompts).toContain('internal error handling request');
    expect(prompts).toContain('[redacted]');
    expectNoSecretIn('the events', JSON.stringify(events));
    expectNoSecretIn('the log', logged);
  });

  it('an MCP server’s header value: quoted in its refusal at registration, at a run’s start, in its tool list and in a tool result, it is redacted', async () => {
    mcpMode = 'refuse-quoting';
    const refused = await testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(tenant.key),
      payload: {
        name: 'refusing',
        url: mcp.url,
        headers: { Authorization: `Bearer ${MCP_TOKEN}` },
      },
    });
    expect(refused.json()).toMatchObject({ code: 'mcp_unreachable' });
    expect(refused.body).toContain('invalid token');
    expectNoSecretIn('the refused registration’s answer', refused.body);

    mcpMode = 'normal';
    const registered = await testApp.app.inject({
      method: 'POST',
      url: '/v1/mcp-servers',
      headers: bearer(tenant.key),
      payload: { name: 'docs', url: mcp.url, headers: { Authorization: `Bearer ${MCP_TOKEN}` } },
    });
    expect(registered.statusCode, registered.body).toBe(201);
    expect(registered.body).toContain('Who holds [redacted]');
    expectNoSecretIn('the registration’s answer', registered.body);
    const listed = await testApp.app.inject({
      method: 'GET',
      url: '/v1/mcp-servers',
      headers: bearer(tenant.key),
    });
    expectNoSecretIn('the server listing', listed.body);

    mcpMode = 'result-quoting';
    const first = provider.requests.length;
    const called = await runToEnd(
      'Who am I?',
      { kind: 'reply', toolCalls: [{ id: 'call_whoami', name: 'docs__whoami', arguments: {} }] },
      { kind: 'reply', text: 'You are you.' },
    );
    expect(called.workflow.status).toBe('completed');
    expect(promptsSince(first)).toContain('you are the holder of');
    expectNoSecretIn('the prompts', promptsSince(first));

    mcpMode = 'refuse-quoting';
    const unavailable = await runToEnd('Who am I now?', { kind: 'reply', text: 'No idea.' });
    expect(unavailable.events.find((event) => event.type === 'warning')?.detail).toMatchObject({
      code: 'tool_source_unavailable',
      message: expect.stringContaining('invalid token'),
    });
    expectNoSecretIn('the events', JSON.stringify([called.events, unavailable.events]));
    expectNoSecretIn('the log', logged);
  });

  it('a stream token in an events URL is redacted from the request log, its parameter name percent-encoded or not', async () => {
    const { id } = await runToEnd('Stream me', { kind: 'reply', text: 'Streamed.' });
    const issued = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${id}/stream-token`,
      headers: bearer(tenant.key),
    });
    const { token } = issued.json() as { token: string };
    for (const name of ['token', 'tok%65n', '%74%6F%6B%65%6E']) {
      const response = await testApp.app.inject({
        method: 'GET',
        url: `/v1/workflows/${id}/events?${name}=${token}`,
      });
      // Each spelling is the token to the server: it authenticates.
      expect(response.statusCode, name).toBe(200);
    }
    expect(logged).not.toContain(token);
  });

  it('an API key a client put in a URL (EventSource sends no header) is redacted from the request log, under any parameter name', async () => {
    const { id } = await runToEnd('Key in a URL', { kind: 'reply', text: 'Answered.' });
    for (const url of [
      `/v1/workflows/${id}/events?api_key=${tenant.key}`,
      `/v1/me?access_token=${tenant.key}&after=1`,
      `/v1/workflows/${id}/events?key%3D=${encodeURIComponent(tenant.key)}`,
    ]) {
      const response = await testApp.app.inject({ method: 'GET', url });
      // The key authenticates only in its header.
      expect(response.statusCode, url).toBe(401);
    }
    expect(logged).toContain('api_key=[redacted]');
    expect(logged).not.toContain(tenant.key);
  });

  it('a body that is not JSON: its 400 and the log line for it do not quote the body', async () => {
    const response = await testApp.app.inject({
      method: 'POST',
      url: '/v1/tools',
      headers: { ...bearer(tenant.key), 'content-type': 'application/json' },
      // A header value typed without its quotes.
      payload: `{"name":"unquoted","headers":{"X-Api-Key":${TOOL_API_KEY}}}`,
    });
    expect(response.json()).toMatchObject({ status: 400, code: 'malformed_json' });
    expect(response.body).not.toContain('tool-apikey');
    expect(logged).not.toContain('tool-apikey');
  });

  it('a 500 says nothing of its cause (no SQL, relation, stack or host); the log has it', async () => {
    await testApp.services.database.pool.query('ALTER TABLE http_tools RENAME TO http_tools_gone');
    try {
      const response = await testApp.app.inject({
        method: 'GET',
        url: '/v1/tools',
        headers: bearer(tenant.key),
      });
      expect(response.statusCode).toBe(500);
      expect(response.json()).toEqual({
        type: 'urn:waymark:problem:internal_error',
        title: 'Internal Server Error',
        status: 500,
        detail: 'An internal error occurred',
        instance: '/v1/tools',
        code: 'internal_error',
        requestId: expect.any(String),
      });
      const { requestId } = response.json() as { requestId: string };
      const line = logged
        .split('\n')
        .find((text) => text.includes(requestId) && text.includes('"level":50'));
      expect(line).toContain('http_tools');
    } finally {
      await testApp.services.database.pool.query(
        'ALTER TABLE http_tools_gone RENAME TO http_tools',
      );
    }
  });

  it('a provider’s refusal quoting the key it was sent, logged with the failed classification check: the log line has the message, not the key', async () => {
    // A replica of its own: its 401s open circuits the other tests do not see.
    const classifying = await startTestAppOn(
      database,
      // Claude has no fallback: the check's one attempt is the error logged.
      { ...env, CLASSIFY_WITH_MODEL: 'true', CLASSIFY_MODEL: 'claude' },
      productionLogger(env),
    );
    try {
      provider.enqueue({
        kind: 'error',
        status: 401,
        body: anthropicError(`invalid x-api-key: ${ANTHROPIC_KEY}`),
      });
      const id = await startWorkflow(classifying, tenant.key, { input: 'Hello?', mode: 'auto' });
      await waitForStatus(classifying, tenant.key, id, ['completed', 'failed']);
    } finally {
      await classifying.close();
    }
    const line = logged
      .split('\n')
      .find((text) => text.includes('the classification model check failed'));
    // In the message, the stack and the cause, each quoting the provider's JSON body.
    expect(line?.split('invalid x-api-key: [redacted]').length).toBeGreaterThan(3);
    expectNoSecretIn('the log', logged, [ANTHROPIC_KEY]);
  });

  it('provider keys: a 401 from OpenAI, a 500 from Anthropic, a reset connection (last: the 401 opens a circuit)', async () => {
    // Each quotes the key it was sent, as OpenAI's 401 does.
    const retried = await runToEnd(
      'Hello',
      {
        kind: 'error',
        status: 401,
        body: openAiError(`Incorrect API key provided: ${OPENAI_KEY}.`),
      },
      { kind: 'error', status: 500, body: anthropicError(`upstream refused key ${ANTHROPIC_KEY}`) },
    );
    expect(retried.workflow.status).toBe('failed');
    // The 401 opened OpenAI's circuit: this one goes to Anthropic alone.
    const reset = await runToEnd('Hello again', { kind: 'reset' });
    expect(reset.workflow.status).toBe('failed');
    // The keys went where they belong, so their absence below means something.
    expect(provider.requests.map((request) => request.headers.authorization)).toContain(
      `Bearer ${OPENAI_KEY}`,
    );
    const keys = [OPENAI_KEY, ANTHROPIC_KEY];
    expectNoSecretIn('the workflows and their events', JSON.stringify([retried, reset]), keys);
    expectNoSecretIn('the log', logged, keys);
  });

  it('WAYMARK_MODELS that is not JSON (a key pasted in its place): the configuration error does not quote it', () => {
    let thrown: unknown;
    try {
      loadConfig({ WAYMARK_MODELS: OPENAI_KEY });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).message).toMatch(
      /^invalid configuration:\n {2}WAYMARK_MODELS: /,
    );
    expect((thrown as ConfigError).message).not.toContain(OPENAI_KEY.slice(0, 9));
  });
});
