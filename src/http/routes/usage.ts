import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import {
  USAGE_GROUPINGS,
  USAGE_RANGE_DEFAULT_DAYS,
  USAGE_RANGE_MAX_DAYS,
  type UsageReport,
  type UsageReports,
} from '../../llm/usage-reports.js';
import type { TenancyService } from '../../tenancy/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { idParamsSchema, instantSchema } from './schemas.js';

/** `GET /v1/usage` and `GET /v1/tenants/:id/usage`: a tenant's model usage and cost over a range. */

const instant = instantSchema.optional();

const usageQuery = z
  .object({
    from: instant.describe(
      `Calls that started at or after this instant (ISO 8601); default: ${USAGE_RANGE_DEFAULT_DAYS} days before \`to\``,
    ),
    to: instant.describe('and before this one; default: now'),
    groupBy: z
      .enum(USAGE_GROUPINGS)
      .optional()
      .describe('Also add up by model (catalogue name), provider, or UTC day (YYYY-MM-DD)'),
  })
  .strict();

const sumsSchema = {
  calls: z.number().int().describe('Model call attempts: retries and fallbacks each count'),
  failedCalls: z
    .number()
    .int()
    .describe('Attempts that ended in an error; what they used before it counts too'),
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  cachedInputTokens: z.number().int(),
  cacheWriteTokens: z.number().int(),
  costUsd: z.number().describe('At the catalogue’s prices when each call was made'),
};

const usageSchema = z
  .object({
    from: z.iso.datetime(),
    to: z.iso.datetime(),
    groupBy: z.enum(USAGE_GROUPINGS).nullable(),
    totals: z.object(sumsSchema).meta({ id: 'UsageSums' }),
    groups: z
      .array(z.object({ key: z.string(), ...sumsSchema }))
      .describe(
        'One per model, provider or day with calls in the range, by key; empty without groupBy',
      ),
  })
  .meta({ id: 'Usage' });

const description =
  'Added up from the usage ledger, one row per model call attempt of the tenant’s workflows ' +
  '(rows outlive their workflows; USAGE_LEDGER_RETENTION_DAYS deletes old ones). `from` must ' +
  `be before \`to\`, at most ${USAGE_RANGE_MAX_DAYS} days apart (400 \`invalid_time_range\`).`;

function usageToWire(report: UsageReport): z.infer<typeof usageSchema> {
  return {
    ...report,
    from: report.from.toISOString(),
    to: report.to.toISOString(),
  };
}

export const usageRoutes: FastifyPluginAsyncZod<{
  usageReports: UsageReports;
  tenancy: TenancyService;
}> = async (app, { usageReports, tenancy }) => {
  app.get(
    '/usage',
    {
      config: { scope: 'admin' },
      schema: {
        tags: ['tenants'],
        summary: 'What the caller’s tenant’s model calls used and cost over a time range',
        description,
        querystring: usageQuery,
        response: { 200: usageSchema, ...problemResponses(400, 401, 403, 429, 503) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return usageToWire(await usageReports.summarize(tenant.id, request.query));
    },
  );

  app.get(
    '/tenants/:id/usage',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['tenants'],
        summary:
          'What a tenant’s model calls used and cost over a time range (operator admins only)',
        description,
        params: idParamsSchema,
        querystring: usageQuery,
        response: { 200: usageSchema, ...problemResponses(400, 401, 403, 404, 429, 503) },
      },
    },
    async (request) => {
      // 404 for a tenant that does not exist, rather than an empty report.
      const tenant = await tenancy.getTenant(request.params.id);
      return usageToWire(await usageReports.summarize(tenant.id, request.query));
    },
  );
};
