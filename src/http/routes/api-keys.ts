import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { TenancyService } from '../../tenancy/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import {
  apiKeyRateLimitChangeSchema,
  apiKeyRateLimitSchema,
  apiKeySchema,
  apiKeyToWire,
  idParamsSchema,
  instantSchema,
  issuedApiKeySchema,
  issuedApiKeyToWire,
  nameSchema,
  scopeSchema,
} from './schemas.js';

const createApiKeyBody = z
  .object({
    name: nameSchema,
    scopes: z.array(scopeSchema).min(1).default(['member']),
    expiresAt: instantSchema
      .optional()
      .describe(
        'When the key stops working (401 `api_key_expired`), in the future (400 `invalid_expiry`); none: never',
      ),
    rateLimit: apiKeyRateLimitSchema.optional(),
  })
  .strict();

const updateApiKeyBody = z
  .object({
    name: nameSchema.optional().describe('A new name'),
    rateLimit: apiKeyRateLimitChangeSchema.optional(),
  })
  .strict()
  .refine(
    (change) => Object.values(change).some((value) => value !== undefined),
    'name at least one of name, rateLimit',
  );

/** API keys of the caller's tenant. Admin scope throughout. */
export const apiKeyRoutes: FastifyPluginAsyncZod<{ tenancy: TenancyService }> = async (
  app,
  { tenancy },
) => {
  app.post(
    '/api-keys',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['api keys'],
        summary: 'Issue an API key for the caller’s tenant; the secret is shown once',
        body: createApiKeyBody,
        response: { 201: issuedApiKeySchema, ...problemResponses(400, 401, 403, 415, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const issued = await tenancy.issueKey(tenant.id, request.body);
      return reply.code(201).send(issuedApiKeyToWire(issued));
    },
  );

  app.post(
    '/tenants/:id/api-keys',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['api keys'],
        summary: 'Issue an API key for any tenant (operator admins only); the secret is shown once',
        description:
          'For a tenant that lost its keys, or to hand one to a customer: as the tenant’s own ' +
          '`POST /v1/api-keys`, from the operator. 404 for no such tenant.',
        params: idParamsSchema,
        body: createApiKeyBody,
        response: { 201: issuedApiKeySchema, ...problemResponses(400, 401, 403, 404, 415, 429) },
      },
    },
    async (request, reply) => {
      const tenant = await tenancy.getTenant(request.params.id);
      const issued = await tenancy.issueKey(tenant.id, request.body);
      return reply.code(201).send(issuedApiKeyToWire(issued));
    },
  );

  app.get(
    '/api-keys',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['api keys'],
        summary: 'List the API keys of the caller’s tenant, revoked ones included',
        response: {
          200: z.object({ items: z.array(apiKeySchema) }),
          ...problemResponses(401, 403, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return { items: (await tenancy.listKeys(tenant.id)).map(apiKeyToWire) };
    },
  );

  app.patch(
    '/api-keys/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['api keys'],
        summary: 'Rename an API key of the caller’s tenant or change its own rate limit',
        description:
          'Fields left out keep their value. The change applies to the key’s next request on every replica.',
        params: idParamsSchema,
        body: updateApiKeyBody,
        response: { 200: apiKeySchema, ...problemResponses(400, 401, 403, 404, 415, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return apiKeyToWire(await tenancy.updateKey(tenant.id, request.params.id, request.body));
    },
  );

  app.get(
    '/api-keys/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['api keys'],
        summary: 'Get one API key of the caller’s tenant',
        params: idParamsSchema,
        response: { 200: apiKeySchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return apiKeyToWire(await tenancy.getKey(tenant.id, request.params.id));
    },
  );

  app.delete(
    '/api-keys/:id',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['api keys'],
        summary: 'Revoke an API key; it stops working at once',
        description:
          'Revoking a revoked key succeeds again. The last active admin key cannot be revoked (409).',
        params: idParamsSchema,
        response: {
          204: z.null().describe('Revoked'),
          ...problemResponses(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      await tenancy.revokeKey(tenant.id, request.params.id);
      return reply.code(204).send(null);
    },
  );
};
