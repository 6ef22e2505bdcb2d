import { describe, expect, it, vi } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { startTestAppOn } from '../support/app.js';
import {
  ANTHROPIC_KEY,
  expectNoSecretIn,
  OPENAI_KEY,
  useLeakCheckApp,
} from '../support/secret-leaks.js';
import { startWorkflow, waitForStatus } from '../support/workflows.js';

/** Gateway credentials the SDKs read from the environment themselves and send with every request. */
const OPENAI_GATEWAY_KEY = 'oai-gateway-key-leak-check-6666';
const ANTHROPIC_GATEWAY_KEY = 'ant-gateway-key-leak-check-7777';

/** What the SDKs read from the environment for their logging and headers. */
const SDK_VARIABLES = [
  'OPENAI_LOG',
  'ANTHROPIC_LOG',
  'OPENAI_CUSTOM_HEADERS',
  'ANTHROPIC_CUSTOM_HEADERS',
] as const;
const CONSOLE_METHODS = ['log', 'info', 'warn', 'error', 'debug', 'trace'] as const;

/**
 * Provider keys never leave the process by the way of its output, where a
 * provider or an operator hands them back: a provider's refusal quoting
 * the key it was sent (OpenAI's 401 does) is in no log line (the
 * production logger, at trace), no workflow and no event; a key pasted
 * where the configuration wanted JSON is not quoted by its error. (The
 * other secrets: secret-leaks.test.ts.)
 */

const h = useLeakCheckApp();

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

describe('provider keys stay out of logs, workflows, events and configuration errors', () => {
  it('a provider’s refusal quoting the key it was sent, logged with the failed classification check: the log line has the message, not the key', async () => {
    // A replica of its own: its 401s open circuits the other tests do not see.
    const classifying = await startTestAppOn(
      h.database,
      // Claude has no fallback: the check's one attempt is the error logged.
      { ...h.env, CLASSIFY_WITH_MODEL: 'true', CLASSIFY_MODEL: 'claude' },
      h.productionLogger(h.env),
    );
    try {
      h.provider.enqueue({
        kind: 'error',
        status: 401,
        body: anthropicError(`invalid x-api-key: ${ANTHROPIC_KEY}`),
      });
      const id = await startWorkflow(classifying, h.tenant.key, { input: 'Hello?', mode: 'auto' });
      await waitForStatus(classifying, h.tenant.key, id, ['completed', 'failed']);
    } finally {
      await classifying.close();
    }
    const line = h.logged
      .split('\n')
      .find((text) => text.includes('the classification model check failed'));
    // In the message, the stack and the cause, each quoting the provider's JSON body.
    expect(line?.split('invalid x-api-key: [redacted]').length).toBeGreaterThan(3);
    expectNoSecretIn('the log', h.logged, [ANTHROPIC_KEY]);
  });

  it('provider keys: a 401 from OpenAI, a 500 from Anthropic, a reset connection (last: the 401 opens a circuit)', async () => {
    // Each quotes the key it was sent, as OpenAI's 401 does.
    const retried = await h.runToEnd(
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
    const reset = await h.runToEnd('Hello again', { kind: 'reset' });
    expect(reset.workflow.status).toBe('failed');
    // The keys went where they belong, so their absence below means something.
    expect(h.provider.requests.map((request) => request.headers.authorization)).toContain(
      `Bearer ${OPENAI_KEY}`,
    );
    const keys = [OPENAI_KEY, ANTHROPIC_KEY];
    expectNoSecretIn('the workflows and their events', JSON.stringify([retried, reset]), keys);
    expectNoSecretIn('the log', h.logged, keys);
  });

  it('custom headers the SDKs read from the environment (OPENAI_CUSTOM_HEADERS, ANTHROPIC_CUSTOM_HEADERS), quoted in refusals logged with the failed classification check: not in the log', async () => {
    const catalogue = JSON.parse(h.env.WAYMARK_MODELS as string) as { models: object[] };
    const env = {
      ...h.env,
      // No fallback: the error logged is the refusal of the model asked.
      WAYMARK_MODELS: JSON.stringify({
        ...catalogue,
        models: catalogue.models.map((model) => ({ ...model, fallbacks: [] })),
      }),
      OPENAI_CUSTOM_HEADERS: `X-Gateway-Key: ${OPENAI_GATEWAY_KEY}\nX-Team: research`,
      ANTHROPIC_CUSTOM_HEADERS: `Proxy-Authorization: Bearer ${ANTHROPIC_GATEWAY_KEY}`,
      CLASSIFY_WITH_MODEL: 'true',
    };
    // The SDKs read process.env, not the environment the app is given.
    vi.stubEnv('OPENAI_CUSTOM_HEADERS', env.OPENAI_CUSTOM_HEADERS);
    vi.stubEnv('ANTHROPIC_CUSTOM_HEADERS', env.ANTHROPIC_CUSTOM_HEADERS);
    const first = h.provider.requests.length;
    const refusals = [
      { model: 'claude', status: 500, body: anthropicError(`bad Bearer ${ANTHROPIC_GATEWAY_KEY}`) },
      { model: 'gpt', status: 401, body: openAiError(`unknown key ${OPENAI_GATEWAY_KEY}`) },
    ];
    try {
      for (const { model, status, body } of refusals) {
        // A replica of its own for each check, its SDK clients made with the variables set.
        const classifying = await startTestAppOn(
          h.database,
          { ...env, CLASSIFY_MODEL: model },
          h.productionLogger(env),
        );
        try {
          h.provider.enqueue({ kind: 'error', status, body });
          const id = await startWorkflow(classifying, h.tenant.key, { input: 'Hi', mode: 'auto' });
          await waitForStatus(classifying, h.tenant.key, id, ['completed', 'failed']);
        } finally {
          await classifying.close();
        }
      }
    } finally {
      vi.unstubAllEnvs();
    }
    // The headers went where they belong, so their absence below means something.
    const sent = h.provider.requests.slice(first).map((request) => request.headers);
    expect(sent.map((headers) => headers['x-gateway-key'])).toContain(OPENAI_GATEWAY_KEY);
    expect(sent.map((headers) => headers['proxy-authorization'])).toContain(
      `Bearer ${ANTHROPIC_GATEWAY_KEY}`,
    );
    expect(h.logged).toContain('bad [redacted]');
    expect(h.logged).toContain('unknown key [redacted]');
    expectNoSecretIn('the log', h.logged, [OPENAI_GATEWAY_KEY, ANTHROPIC_GATEWAY_KEY]);
  });

  it('the SDKs’ own debug lines (OPENAI_LOG, ANTHROPIC_LOG): JSON lines of the service’s log, request details as fields, keys and custom header values redacted; none on the console', async () => {
    const env = {
      ...h.env,
      OPENAI_LOG: 'debug',
      ANTHROPIC_LOG: 'debug',
      OPENAI_CUSTOM_HEADERS: `X-Gateway-Key: ${OPENAI_GATEWAY_KEY}`,
      ANTHROPIC_CUSTOM_HEADERS: `X-Gateway-Key: ${ANTHROPIC_GATEWAY_KEY}`,
    };
    // The SDKs read process.env, not the environment the app is given.
    for (const name of SDK_VARIABLES) vi.stubEnv(name, env[name]);
    const first = h.provider.requests.length;
    const consoleSpies = CONSOLE_METHODS.map((method) =>
      vi.spyOn(console, method).mockImplementation(() => {}),
    );
    try {
      const replica = await startTestAppOn(h.database, env, h.productionLogger(env));
      try {
        // Refusals as text (a gateway's), which the SDKs' debug lines quote: each names the key it was sent.
        h.provider.enqueue(
          { kind: 'error', status: 401, body: `Incorrect API key provided: ${OPENAI_KEY}` },
          { kind: 'error', status: 500, body: `upstream refused key ${ANTHROPIC_KEY}` },
        );
        const id = await startWorkflow(replica, h.tenant.key, { input: 'Hi', mode: 'simple' });
        await waitForStatus(replica, h.tenant.key, id, ['completed', 'failed']);
      } finally {
        await replica.close();
      }
      expect(consoleSpies.flatMap((spy) => spy.mock.calls)).toEqual([]);
    } finally {
      for (const spy of consoleSpies) spy.mockRestore();
      vi.unstubAllEnvs();
    }
    const lines = h.logged
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    // Each SDK quotes the refusal's text in a field of its own.
    for (const [component, gatewayKey, status, quoted, refusal] of [
      ['openai-sdk', OPENAI_GATEWAY_KEY, 401, 'message', 'Incorrect API key provided: [redacted]'],
      ['anthropic-sdk', ANTHROPIC_GATEWAY_KEY, 500, 'body', 'upstream refused key [redacted]'],
    ] as const) {
      const debug = lines.filter((line) => line.component === component && line.level === 20);
      const sent = debug.find((line) => String(line.msg).endsWith('sending request'));
      // The header went with the request, so its value replaced below means something.
      const sentHeaders = h.provider.requests.slice(first).map((request) => request.headers);
      expect(sentHeaders.map((headers) => headers['x-gateway-key'])).toContain(gatewayKey);
      expect(sent).toMatchObject({
        method: expect.stringMatching(/^post$/i),
        headers: { 'x-gateway-key': '[redacted]' },
      });
      const refused = debug.find((line) => String(line.msg).includes('response error'));
      expect(refused).toMatchObject({ status, [quoted]: refusal });
    }
    expectNoSecretIn('the log', h.logged, [
      OPENAI_KEY,
      ANTHROPIC_KEY,
      OPENAI_GATEWAY_KEY,
      ANTHROPIC_GATEWAY_KEY,
    ]);
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
