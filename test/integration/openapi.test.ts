import { readFile } from 'node:fs/promises';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatOpenApiDocument } from '../../src/http/openapi.js';
import { startTestApp, type TestApp } from '../support/app.js';

let testApp: TestApp;
beforeAll(async () => {
  testApp = await startTestApp();
});
afterAll(async () => testApp?.close());

describe('OpenAPI document', () => {
  it('the committed openapi/openapi.json equals the generated one (run `npm run openapi`)', async () => {
    const committed = await readFile(
      new URL('../../openapi/openapi.json', import.meta.url),
      'utf8',
    );
    expect(committed).toBe(formatOpenApiDocument(testApp.app.swagger()));
  });

  it('passes a standard OpenAPI 3.1 validator', async () => {
    const validator = new Validator();
    const result = await validator.validate(
      JSON.parse(formatOpenApiDocument(testApp.app.swagger())),
    );
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('is served at /openapi.json and documents every public route', async () => {
    const response = await testApp.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(response.statusCode).toBe(200);
    const document = response.json();
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining([
        '/healthz',
        '/readyz',
        '/v1/tenants',
        '/v1/api-keys',
        '/v1/api-keys/{id}',
      ]),
    );
    expect(document.paths['/v1/api-keys'].get.security).toEqual([{ bearerAuth: [] }]);
    expect(document.paths['/healthz'].get.security).toBeUndefined();
  });

  it('documents a 500 and a 503 problem for every operation', () => {
    // The JSON as served: every path item here holds only operations.
    const document = JSON.parse(formatOpenApiDocument(testApp.app.swagger())) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    const operations = Object.entries(document.paths).flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, operation]) => ({
        operation: `${method} ${path}`,
        statuses: ['500', '503'].filter((status) => status in operation.responses),
      })),
    );
    expect(operations.length).toBeGreaterThan(20);
    for (const { operation, statuses } of operations) {
      expect(statuses, operation).toEqual(['500', '503']);
    }
  });

  it('has an interactive page at /docs', async () => {
    const response = await testApp.app.inject({ method: 'GET', url: '/docs' });
    const page =
      response.statusCode === 302
        ? await testApp.app.inject({ method: 'GET', url: response.headers.location as string })
        : response;
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    expect(page.body).toContain('swagger');
  });
});
