import { z } from 'zod';
import type { ApiKey, IssuedApiKey, Tenant } from '../../tenancy/types.js';
import { SCOPES } from '../../tenancy/types.js';
import { tenantBudgetSchema } from './budget-schemas.js';

/** Wire shapes shared by the tenancy routes; the OpenAPI document names them. */

/**
 * A short human-given name. Control characters are refused: they have no
 * place in a name, and PostgreSQL rejects NUL in text outright.
 */
export const nameSchema = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters');

export const scopeSchema = z.enum(SCOPES).meta({ id: 'Scope' });

export const apiKeySchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    prefix: z.string().describe('The first characters of the key, to tell keys apart'),
    scopes: z.array(scopeSchema),
    createdAt: z.iso.datetime(),
    revokedAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'ApiKey' });

export const issuedApiKeySchema = apiKeySchema
  .extend({
    key: z.string().describe('The secret key. Shown only in this response; store it now.'),
  })
  .meta({ id: 'IssuedApiKey' });

export const tenantSchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    isOperator: z.boolean(),
    createdAt: z.iso.datetime(),
    defaultModel: z
      .string()
      .nullable()
      .describe('Model used when a request names none; null: the system default'),
    allowedModels: z
      .array(z.string())
      .nullable()
      .describe('Models the tenant may use; null: every configured model'),
    budget: tenantBudgetSchema,
  })
  .meta({ id: 'Tenant' });

export const idParamsSchema = z.object({ id: z.uuid() });

export function apiKeyToWire(key: ApiKey): z.infer<typeof apiKeySchema> {
  return {
    id: key.id,
    name: key.name,
    prefix: key.prefix,
    scopes: key.scopes,
    createdAt: key.createdAt.toISOString(),
    revokedAt: key.revokedAt?.toISOString() ?? null,
  };
}

export function issuedApiKeyToWire(issued: IssuedApiKey): z.infer<typeof issuedApiKeySchema> {
  return { ...apiKeyToWire(issued.apiKey), key: issued.secret };
}

export function tenantToWire(tenant: Tenant): z.infer<typeof tenantSchema> {
  return {
    id: tenant.id,
    name: tenant.name,
    isOperator: tenant.isOperator,
    createdAt: tenant.createdAt.toISOString(),
    defaultModel: tenant.defaultModel,
    allowedModels: tenant.allowedModels,
    budget: tenant.budget,
  };
}
