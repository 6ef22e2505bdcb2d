import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import packageJson from '../../package.json' with { type: 'json' };
import { problemSchema } from './problem.js';

/**
 * The OpenAPI 3.1 document is generated from the routes' zod schemas (the
 * single source); `npm run openapi` writes it to openapi/openapi.json and a
 * test fails when the committed copy drifts.
 */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Waymark API',
        version: packageJson.version,
        description:
          'Orchestration service for LLM agents. Errors are application/problem+json (RFC 9457) with a stable `code`.',
      },
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key: wmk_...' },
          streamToken: {
            type: 'apiKey',
            in: 'query',
            name: 'token',
            description:
              'A stream token from POST /v1/workflows/{id}/stream-token; opens only that workflow’s events URL',
          },
        },
      },
    },
    transform: (route) => jsonSchemaTransform(withServerErrors(route)),
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

/**
 * Every route may answer 500 (a bug), and 503 while the process shuts down
 * or its database cannot be reached (`database_unavailable`): documented
 * once for all of them, each a route's own schema may still state.
 */
function withServerErrors<Route extends Parameters<typeof jsonSchemaTransform>[0]>(
  route: Route,
): Route {
  const { response } = route.schema;
  if (!response || typeof response !== 'object') return route;
  return {
    ...route,
    schema: { ...route.schema, response: { 500: problemSchema, 503: problemSchema, ...response } },
  };
}

/** The committed form of the document: stable key order as generated, two-space JSON. */
export function formatOpenApiDocument(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}
