import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Catalogue } from '../../llm/catalogue.js';
import { validateTenantModels } from '../../llm/model-selection.js';
import type { TenancyService } from '../../tenancy/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { tenantBudgetChangesSchema } from './budget-schemas.js';
import {
  apiKeySchema,
  apiKeyToWire,
  idParamsSchema,
  issuedApiKeySchema,
  issuedApiKeyToWire,
  listPageFields,
  nameSchema,
  pageSchema,
  tenantRateLimitChangesSchema,
  tenantSchema,
  tenantToWire,
} from './schemas.js';

const defaultModelSchema = z
  .string()
  .min(1)
  .describe('A catalogue model name (see GET /v1/models)');
const allowedModelsSchema = z
  .array(z.string().min(1))
  .min(1)
  .describe('Catalogue model names the tenant may use; all when omitted');

const createTenantBody = z
  .object({
    name: nameSchema,
    adminKeyName: nameSchema.optional(),
    defaultModel: defaultModelSchema.optional(),
    allowedModels: allowedModelsSchema.optional(),
    budget: tenantBudgetChangesSchema.optional(),
    rateLimit: tenantRateLimitChangesSchema.optional(),
  })
  .strict();

const updateTenantBody = z
  .object({
    name: nameSchema.optional(),
    defaultModel: defaultModelSchema
      .nullable()
      .optional()
      .describe('A catalogue model name; null: the system default'),
    allowedModels: allowedModelsSchema
      .nullable()
      .optional()
      .describe('Catalogue model names the tenant may use; null: all of them'),
    budget: tenantBudgetChangesSchema.optional(),
    rateLimit: tenantRateLimitChangesSchema.optional(),
    suspended: z
      .boolean()
      .optional()
      .describe(
        'true suspends the tenant: its API keys and stream tokens get 403 `tenant_suspended` from its next request on, on every replica (the operator tenant: 400 `operator_not_suspendable`); false lifts it',
      ),
  })
  .strict();

const listTenantsQuery = z.object({ ...listPageFields }).strict();

const tenantPageSchema = pageSchema(tenantSchema, 'TenantPage');

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
    '/tenants',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary: 'List the tenants, newest first (operator admins only)',
        description: 'Every tenant, the operator tenant among them, with its settings.',
        querystring: listTenantsQuery,
        response: { 200: tenantPageSchema, ...problemResponses(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const page = await tenancy.listTenants(request.query);
      return { items: page.items.map(tenantToWire), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/tenants/:id',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary: 'Get a tenant and its settings (operator admins only)',
        params: idParamsSchema,
        response: { 200: tenantSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => tenantToWire(await tenancy.getTenant(request.params.id)),
  );

  app.patch(
    '/tenants/:id',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary:
          'Change a tenant’s name, models, budget or rate limit, or suspend it (operator admins only)',
        description:
          'A field left out stays as it is; null returns a setting to its default. The new ' +
          'settings apply to workflows created afterwards; running workflows keep the budget ' +
          'they were created with. A new rate limit, and a suspension, apply to the tenant’s ' +
          'next request. A suspended tenant’s running workflows go on to their end or their ' +
          'next pause; event streams already open go on.',
        params: idParamsSchema,
        body: updateTenantBody,
        response: { 200: tenantSchema, ...problemResponses(400, 401, 403, 404, 415, 429) },
      },
    },
    async (request) => {
      const { body } = request;
      // Checked only when they change: a budget update must not fail on a model the catalogue dropped.
      const changesModels = body.defaultModel !== undefined || body.allowedModels !== undefined;
      const tenant = await tenancy.updateTenant(request.params.id, body, (next) => {
        if (changesModels) validateTenantModels(catalogue, next);
      });
      return tenantToWire(tenant);
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
