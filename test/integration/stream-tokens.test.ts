import { createHmac } from 'node:crypto';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { closeServices, createServices } from '../../src/services.js';
import { readMigrations } from '../../src/store/migrate.js';
import { createStreamTokens } from '../../src/tenancy/stream-tokens.js';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  insertWorkflow,
  listen,
  openStream,
  operatorTenant,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * Stream tokens: what a browser puts in `?token=` of an events URL, since
 * its EventSource cannot send the API key in a header (and the key must
 * never travel in a URL).
 */

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ SSE_RETRY_MS: '20' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

async function issueToken(app: TestApp, workflowId: string) {
  const response = await app.app.inject({
    method: 'POST',
    url: `/v1/workflows/${workflowId}/stream-token`,
    headers: bearer(key),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json() as { token: string; expiresAt: string; url: string };
}

function getEvents(workflowId: string, token: string, app: TestApp = testApp) {
  return app.app.inject({
    method: 'GET',
    url: `/v1/workflows/${workflowId}/events?token=${encodeURIComponent(token)}`,
  });
}

describe('stream tokens', () => {
  it('POST /stream-token returns a signed token, its expiry and the events URL, which streams without an API key', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const before = Date.now();
    const issued = await issueToken(testApp, workflowId);
    expect(issued.url).toBe(`/v1/workflows/${workflowId}/events?token=${issued.token}`);
    expect(issued.token).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
    expect(issued.token).not.toContain(key);
    const lifetime = Date.parse(issued.expiresAt) - before;
    expect(lifetime).toBeGreaterThanOrEqual(300_000);
    expect(lifetime).toBeLessThanOrEqual(302_000);

    const client = openStream(`${baseUrl}${issued.url}`);
    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();
    await tracker.emit('tool_call', 'search', 'completed');
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(client.ended, 10_000, 'the stream ends');
    expect(client.events.map((event) => event.seq)).toEqual([1, 2, 3]);
  });

  it('opens only its own workflow’s events: another workflow’s events URL answers 401', async () => {
    const mine = await insertWorkflow(testApp, tenantId);
    const other = await insertWorkflow(testApp, tenantId);
    const { token } = await issueToken(testApp, mine);
    const response = await getEvents(other, token);
    expect(response.statusCode).toBe(401);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({ code: 'stream_token_scope' });
  });

  it('opens no other route: GET /v1/workflows/:id?token= still needs an API key', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const { token } = await issueToken(testApp, workflowId);
    const response = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${workflowId}?token=${token}`,
    });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toMatchObject({ code: 'missing_api_key' });
  });

  it('a tampered token answers 401: a payload naming another workflow, or a changed signature', async () => {
    const mine = await insertWorkflow(testApp, tenantId);
    const other = await insertWorkflow(testApp, tenantId);
    const { token } = await issueToken(testApp, mine);
    const [payload, signature] = token.split('.') as [string, string];
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    const forged = `${Buffer.from(JSON.stringify({ ...claims, workflowId: other })).toString('base64url')}.${signature}`;
    const forgedResponse = await getEvents(other, forged);
    expect(forgedResponse.statusCode).toBe(401);
    expect(forgedResponse.json()).toMatchObject({ code: 'invalid_stream_token' });

    const flipped = `${payload}.${signature[0] === 'A' ? 'B' : 'A'}${signature.slice(1)}`;
    const flippedResponse = await getEvents(mine, flipped);
    expect(flippedResponse.statusCode).toBe(401);
    expect(flippedResponse.json()).toMatchObject({ code: 'invalid_stream_token' });

    const twice = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${mine}/events?token=${token}&token=${token}`,
    });
    expect(twice.statusCode).toBe(401);
  });

  it('the API key in ?token= is refused', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const response = await getEvents(workflowId, key);
    expect(response.statusCode).toBe(401);
    expect(response.json()).toMatchObject({ code: 'invalid_stream_token' });
  });

  it('an expired token answers 401 stream_token_expired, on any replica', async () => {
    const shortLived = await startTestAppOn(testApp.database, { STREAM_TOKEN_TTL_SECONDS: '1' });
    try {
      const workflowId = await insertWorkflow(testApp, tenantId);
      const issued = await issueToken(shortLived, workflowId);
      const wait = Date.parse(issued.expiresAt) - Date.now() + 50;
      expect(wait).toBeLessThan(2_100);
      await new Promise((resolve) => setTimeout(resolve, wait));
      for (const app of [shortLived, testApp]) {
        const response = await getEvents(workflowId, issued.token, app);
        expect(response.statusCode).toBe(401);
        expect(response.json()).toMatchObject({ code: 'stream_token_expired' });
      }
    } finally {
      await shortLived.close();
    }
  });

  it('POST /stream-token answers 404 for another tenant’s workflow and needs an API key', async () => {
    const other = await testApp.services.tenancy.createTenant({ name: 'token neighbours' });
    const theirs = await insertWorkflow(testApp, other.tenant.id);
    const foreign = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${theirs}/stream-token`,
      headers: bearer(key),
    });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({ code: 'not_found' });

    const mine = await insertWorkflow(testApp, tenantId);
    const { token } = await issueToken(testApp, mine);
    const withToken = await testApp.app.inject({
      method: 'POST',
      url: `/v1/workflows/${mine}/stream-token?token=${token}`,
    });
    expect(withToken.statusCode).toBe(401);
  });

  it('never reaches the logs: the request URL is logged with the token redacted', async () => {
    const lines: string[] = [];
    const services = createServices({
      config: loadConfig({ LOG_LEVEL: 'debug' }),
      log: pino({ level: 'debug' }, { write: (line: string) => lines.push(line) }),
      databaseUrl: testApp.database.url,
      migrations: await readMigrations(),
    });
    await services.hub.start();
    const app = await buildApp(services);
    let token = '';
    try {
      await app.ready();
      const workflowId = await insertWorkflow(testApp, tenantId);
      const tracker = trackerOn(testApp, { tenantId, workflowId });
      await tracker.begin();
      await tracker.end({ status: 'completed', answer: 'done' });
      ({ token } = await issueToken(testApp, workflowId));
      const streamed = await app.inject({
        method: 'GET',
        url: `/v1/workflows/${workflowId}/events?token=${token}`,
      });
      expect(streamed.statusCode).toBe(200);
      const refused = await app.inject({
        method: 'GET',
        url: `/v1/workflows/${workflowId}/events?after=1&token=${token}x`,
      });
      expect(refused.statusCode).toBe(401);
    } finally {
      await app.close();
      await closeServices(services);
    }
    const log = lines.join('');
    expect(log).toContain('token=[redacted]');
    expect(log).toContain('after=1&token=[redacted]');
    expect(token).not.toBe('');
    for (const part of token.split('.')) expect(log).not.toContain(part);
  });
});

describe('createStreamTokens', () => {
  it('a token is valid until its expiry by the injected clock, and every instance over the database shares one secret', async () => {
    let now = Date.parse('2026-11-30T12:00:00.000Z');
    const options = { db: testApp.services.database.db, ttlSeconds: 60, now: () => now };
    // Instances racing to create the secret: one wins, all use it.
    const instances = Array.from({ length: 4 }, () => createStreamTokens(options));
    const grant = { tenantId, workflowId: '7b0c3c1e-1a52-4bd4-9df5-6a4f6d7c2b10' };
    const issued = await Promise.all(instances.map((tokens) => tokens.issue(grant)));
    for (const tokens of instances) {
      for (const { token } of issued) {
        await expect(tokens.verify(token)).resolves.toMatchObject(grant);
      }
    }
    const { token, expiresAt } = issued[0] as { token: string; expiresAt: Date };
    expect(expiresAt.toISOString()).toBe('2026-11-30T12:01:00.000Z');
    now = expiresAt.getTime() - 1;
    await expect(instances[1]?.verify(token)).resolves.toMatchObject(grant);
    now = expiresAt.getTime();
    await expect(instances[1]?.verify(token)).rejects.toMatchObject({
      status: 401,
      code: 'stream_token_expired',
    });
  });

  it('a token of an earlier release, which also carries the keyId it was issued to, stays valid', async () => {
    const tokens = createStreamTokens({ db: testApp.services.database.db, ttlSeconds: 60 });
    const workflowId = '7b0c3c1e-1a52-4bd4-9df5-6a4f6d7c2b10';
    // Creates the deployment's secret if no test before did.
    await tokens.issue({ tenantId, workflowId });
    const { value } = await testApp.services.database.db
      .selectFrom('service_secrets')
      .select('value')
      .where('name', '=', 'stream-token-hmac-sha256')
      .executeTakeFirstOrThrow();
    const exp = Math.ceil(Date.now() / 1000) + 60;
    const keyId = '0b7e6c1a-52d4-4f3e-9a1b-2c3d4e5f6a7b';
    const payload = Buffer.from(JSON.stringify({ tenantId, workflowId, keyId, exp })).toString(
      'base64url',
    );
    const signature = createHmac('sha256', value).update(payload).digest('base64url');
    await expect(tokens.verify(`${payload}.${signature}`)).resolves.toEqual({
      tenantId,
      workflowId,
      expiresAt: new Date(exp * 1000),
    });
  });
});
