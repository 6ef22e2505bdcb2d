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
    transform: (route) => jsonSchemaTransform(withCommonProblems(route)),
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

/**
 * What the document says every route may answer besides its own
 * responses, each a route's own schema may still state: 500 (a bug) and
 * 503 (shutting down, the database cannot be reached or gave up on a
 * statement); with path parameters, the router's 400 `invalid_url` and 414
 * `path_parameter_too_long`; with a method that carries a body, 413
 * `payload_too_large` and 415 `unsupported_media_type`. Problems are
 * documented as what they are served as, application/problem+json.
 */
function withCommonProblems<Route extends Parameters<typeof jsonSchemaTransform>[0]>(
  route: Route,
): Route {
  const { response, params } = route.schema;
  if (!response || typeof response !== 'object') return route;
  const methods = [route.route.method].flat();
  const statuses = [500, 503];
  if (params) statuses.push(400, 414);
  if (methods.some((method) => !BODILESS_METHODS.has(method))) statuses.push(413, 415);
  const merged: Record<string, unknown> = {
    ...Object.fromEntries(statuses.map((status) => [status, problemSchema])),
    ...response,
  };
  for (const [status, schema] of Object.entries(merged)) {
    if (schema === problemSchema) merged[status] = PROBLEM_CONTENT;
  }
  return { ...route, schema: { ...route.schema, response: merged } };
}

const BODILESS_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

const PROBLEM_CONTENT = {
  description: 'A problem (RFC 9457) with a stable `code`',
  content: { 'application/problem+json': { schema: problemSchema } },
};

/** The committed form of the document: stable key order as generated, two-space JSON. */
export function formatOpenApiDocument(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}
