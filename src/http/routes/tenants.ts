import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Catalogue } from '../../llm/catalogue.js';
import { validateTenantModels } from '../../llm/model-selection.js';
import type { TenancyService } from '../../tenancy/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import {
  apiKeySchema,
  apiKeyToWire,
  issuedApiKeySchema,
  issuedApiKeyToWire,
  nameSchema,
  tenantSchema,
  tenantToWire,
} from './schemas.js';

const createTenantBody = z
  .object({
    name: nameSchema,
    adminKeyName: nameSchema.optional(),
    defaultModel: z
      .string()
      .min(1)
      .optional()
      .describe('A catalogue model name (see GET /v1/models)'),
    allowedModels: z
      .array(z.string().min(1))
      .min(1)
      .optional()
      .describe('Catalogue model names the tenant may use; all when omitted'),
  })
  .strict();

export const tenantRoutes: FastifyPluginAsyncZod<{
  tenancy: TenancyService;
  catalogue: Catalogue;
}> = async (app, { tenancy, catalogue }) => {
  app.post(
    '/tenants',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary: 'Create a tenant with its first admin key (operator admins only)',
        body: createTenantBody,
        response: {
          201: z.object({ tenant: tenantSchema, adminKey: issuedApiKeySchema }),
          ...problemResponses(400, 401, 403, 415, 429),
        },
      },
    },
    async (request, reply) => {
      validateTenantModels(catalogue, request.body);
      const created = await tenancy.createTenant(request.body);
      return reply.code(201).send({
        tenant: tenantToWire(created.tenant),
        adminKey: issuedApiKeyToWire(created.adminKey),
      });
    },
  );

  app.get(
    '/me',
    {
      schema: {
        tags: ['tenants'],
        summary: 'The tenant and API key the request is authenticated as',
        response: {
          200: z.object({ tenant: tenantSchema, apiKey: apiKeySchema }),
          ...problemResponses(401, 429),
        },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return { tenant: tenantToWire(principal.tenant), apiKey: apiKeyToWire(principal.key) };
    },
  );
};
