import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Catalogue } from '../../llm/catalogue.js';
import { validateTenantModels } from '../../llm/model-selection.js';
import type { TenancyService } from '../../tenancy/service.js';
import type { WorkflowService } from '../../workflows/service.js';
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

/** Workflows one cancel of a tenant's open ones takes when the request does not say. */
const DEFAULT_CANCEL_LIMIT = 100;

const cancelOpenBody = z
  .object({
    limit: z
      .number()
      .int()
      .min(1)
      .max(500)
      .optional()
      .describe(`Most workflows cancelled by this request (${DEFAULT_CANCEL_LIMIT} when omitted)`),
  })
  .strict();

const openCancelledSchema = z
  .object({
    cancelled: z.number().int().describe('Workflows this request cancelled'),
    more: z
      .boolean()
      .describe('Open workflows are left (past the limit, or started meanwhile): call again'),
  })
  .meta({ id: 'OpenWorkflowsCancelled' });

const listTenantsQuery = z.object({ ...listPageFields }).strict();

const tenantPageSchema = pageSchema(tenantSchema, 'TenantPage');

export const tenantRoutes: FastifyPluginAsyncZod<{
  tenancy: TenancyService;
  catalogue: Catalogue;
  workflows: Pick<WorkflowService, 'cancelOpen'>;
}> = async (app, { tenancy, catalogue, workflows }) => {
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
          'next pause (`POST /v1/tenants/:id/workflows/cancel` stops them); event streams ' +
          'already open go on.',
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

  app.post(
    '/tenants/:id/workflows/cancel',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary: 'Cancel a tenant’s open workflows (operator admins only)',
        description:
          'Cancels up to `limit` of the tenant’s queued, running and paused workflows, running ' +
          'ones first, each as `POST /v1/workflows/:id/cancel` does (its run stopped on ' +
          'whichever replica; `workflow_end` reason "cancelled by the operator"): with a ' +
          'suspension, this stops what the tenant spends. `more` says whether open ones are ' +
          'left; call again until it is false.',
        params: idParamsSchema,
        body: cancelOpenBody.nullish(),
        response: { 200: openCancelledSchema, ...problemResponses(400, 401, 403, 404, 415, 429) },
      },
    },
    async (request) => {
      const tenant = await tenancy.getTenant(request.params.id);
      return workflows.cancelOpen(tenant.id, request.body?.limit ?? DEFAULT_CANCEL_LIMIT);
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
