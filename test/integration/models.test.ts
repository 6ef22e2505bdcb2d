import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, type TestApp } from '../support/app.js';

let testApp: TestApp;
let operatorKey: string;

const scripted = (name: string) => ({
  name,
  provider: 'offline',
  modelId: name,
  contextWindow: 32_000,
  maxOutputTokens: 1_000,
});

beforeAll(async () => {
  testApp = await startTestApp({
    WAYMARK_MODELS: JSON.stringify({
      providers: [{ name: 'offline', kind: 'scripted' }],
      models: [scripted('fast'), scripted('smart')],
      defaultModel: 'fast',
    }),
  });
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  operatorKey = created.adminKey.secret;
});
afterAll(async () => testApp?.close());

async function createTenant(payload: Record<string, unknown>) {
  return testApp.app.inject({
    method: 'POST',
    url: '/v1/tenants',
    headers: bearer(operatorKey),
    payload,
  });
}

describe('models per tenant', () => {
  it('GET /v1/models lists every configured model and the system default for an unrestricted tenant', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/models',
      headers: bearer(operatorKey),
    });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({
      items: [
        { name: 'fast', provider: 'offline', contextWindow: 32_000, maxOutputTokens: 1_000 },
        { name: 'smart', provider: 'offline', contextWindow: 32_000, maxOutputTokens: 1_000 },
      ],
      defaultModel: 'fast',
    });
  });

  it('a tenant created with allowed models and a default sees only those', async () => {
    const created = await createTenant({
      name: 'restricted',
      allowedModels: ['smart'],
      defaultModel: 'smart',
    });
    expect(created.statusCode).toBe(201);
    expect(created.json().tenant).toMatchObject({
      allowedModels: ['smart'],
      defaultModel: 'smart',
    });
    const models = await testApp.app.inject({
      method: 'GET',
      url: '/v1/models',
      headers: bearer(created.json().adminKey.key),
    });
    expect(models.json()).toEqual({
      items: [expect.objectContaining({ name: 'smart' })],
      defaultModel: 'smart',
    });
  });

  it('unknown models or a default outside the allowed list are a 400 naming the fields, and create nothing', async () => {
    const unknown = await createTenant({ name: 'bad models', allowedModels: ['fast', 'gpt-99'] });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toMatchObject({
      code: 'unknown_model',
      errors: [{ field: 'body.allowedModels.1', message: 'unknown model "gpt-99"' }],
    });
    const outside = await createTenant({
      name: 'bad default',
      allowedModels: ['fast'],
      defaultModel: 'smart',
    });
    expect(outside.statusCode).toBe(400);
    expect(outside.json().errors).toEqual([
      { field: 'body.defaultModel', message: 'must be one of allowedModels' },
    ]);
    const { rows } = await testApp.services.database.pool.query(
      "SELECT count(*)::int AS count FROM tenants WHERE name IN ('bad models', 'bad default')",
    );
    expect(rows[0].count).toBe(0);
  });
});
