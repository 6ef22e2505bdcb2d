import { z } from 'zod';
import type { ApiKey, IssuedApiKey, Tenant } from '../../tenancy/types.js';
import { RATE_LIMIT_MAX_BOUND, SCOPES } from '../../tenancy/types.js';
import { tenantBudgetSchema } from './budget-schemas.js';

/** Wire shapes shared by the routes (the tenancy routes' own among them); the OpenAPI document names them. */

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

/** The largest PostgreSQL `integer` (seqs, versions): a larger number in a request is a 400, not a failed query. */
export const MAX_POSTGRES_INTEGER = 2_147_483_647;

/** A session's id, in a body or a query string: refused before it reaches a query (NUL, say). */
export const sessionIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9._:-]{1,128}$/, 'letters, digits and . _ : - only, at most 128')
  // A session's id is a uuid, which names it in capitals too: the lower-case form is the one stored.
  .transform((id) => id.toLowerCase());

/** PostgreSQL rejects NUL in text and in jsonb strings; refusing it in a schema makes it a 400, not a 500. */
export const hasNoNul = (text: string): boolean => !text.includes('\u0000');

/** `hasNoNul` for a JSON value (its strings and keys), as a jsonb column takes it. */
export const hasNoNulInJson = (value: unknown): boolean =>
  !JSON.stringify(value).includes('\\u0000');

export const NO_NUL_MESSAGE = 'must not contain NUL characters';

const MAX_METADATA_BYTES = 16 * 1024;

/** The client data a request may keep with what it creates (`kept with`: the workflow, the session). */
export function metadataSchema(keptWith: string) {
  return z
    .record(z.string(), z.unknown())
    .refine(
      (metadata) => Buffer.byteLength(JSON.stringify(metadata)) <= MAX_METADATA_BYTES,
      `must be at most ${MAX_METADATA_BYTES} bytes as JSON`,
    )
    .refine(hasNoNulInJson, NO_NUL_MESSAGE)
    .optional()
    .describe(`Client data kept with ${keptWith}, at most 16 KiB as JSON`);
}

export const scopeSchema = z.enum(SCOPES).meta({ id: 'Scope' });

/** A rate limit as answers show it (a tenant's, a key's): `max`, or null where none of its own is set. */
function rateLimitSchema(id: string, maxDescription: string) {
  return z.object({ max: z.number().int().nullable().describe(maxDescription) }).meta({ id });
}

export const apiKeySchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    prefix: z.string().describe('The first characters of the key, to tell keys apart'),
    scopes: z.array(scopeSchema),
    createdAt: z.iso.datetime(),
    revokedAt: z.iso.datetime().nullable(),
    expiresAt: z.iso
      .datetime()
      .nullable()
      .describe('When it stops working (401 `api_key_expired`); null: never'),
    lastUsedAt: z.iso
      .datetime()
      .nullable()
      .describe('When it was last used, to the hour; null: not yet'),
    rateLimit: rateLimitSchema(
      'ApiKeyRateLimit',
      'Requests per RATE_LIMIT_WINDOW_MS, over every replica, within the tenant’s limit; null: only the tenant’s applies',
    ).describe('The key’s own rate limit'),
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
    rateLimit: rateLimitSchema(
      'TenantRateLimit',
      'Requests per RATE_LIMIT_WINDOW_MS, over every replica; null: RATE_LIMIT_MAX',
    ).describe('The tenant’s rate limit: all its API keys and stream tokens together'),
    suspendedAt: z.iso
      .datetime()
      .nullable()
      .describe(
        'Since when the operator has suspended the tenant (its keys and stream tokens get 403 `tenant_suspended`); null: not suspended',
      ),
  })
  .meta({ id: 'Tenant' });

/** A limit given (a tenant's, a key's): a whole number of requests per window, from 1 to RATE_LIMIT_MAX_BOUND. */
const rateLimitMaxSchema = z.number().int().min(1).max(RATE_LIMIT_MAX_BOUND);

/** An API key's own rate limit, set when it is issued (POST /v1/api-keys, /v1/tenants/:id/api-keys). */
export const apiKeyRateLimitSchema = z
  .object({ max: rateLimitMaxSchema.describe('Requests per RATE_LIMIT_WINDOW_MS') })
  .strict()
  .describe(
    'The key’s own rate limit, within its tenant’s: its requests count against both, and a request refused by the key’s spends nothing of the tenant’s. None: only the tenant’s applies.',
  );

/** A change to an API key's own rate limit, in PATCH /v1/api-keys/:id. */
export const apiKeyRateLimitChangeSchema = z
  .object({
    max: rateLimitMaxSchema
      .nullable()
      .describe('Requests per RATE_LIMIT_WINDOW_MS; null: only the tenant’s limit applies'),
  })
  .strict()
  .describe('The key’s own rate limit, within its tenant’s; it applies to the key’s next request.');

/** The rate limit an operator gives a tenant (its plan), in POST and PATCH /v1/tenants. */
export const tenantRateLimitChangesSchema = z
  .object({
    max: rateLimitMaxSchema
      .nullable()
      .optional()
      .describe('Requests per RATE_LIMIT_WINDOW_MS; null: RATE_LIMIT_MAX'),
  })
  .strict()
  .describe(
    'The tenant’s own rate limit: `max` left out stays as it is, null returns it to RATE_LIMIT_MAX. ' +
      'It applies to the tenant’s next request, on every replica.',
  );

/**
 * A resource's id in a path. A uuid names it in capitals too (PostgreSQL finds
 * the row either way), but the code compares ids, announces them to other
 * replicas and keys caches and runs by them: the lower-case form is the one used.
 */
/** An instant a request gives, ISO 8601 with `Z` or an offset, as a Date. */
export const instantSchema = z.iso.datetime({ offset: true }).transform((text) => new Date(text));

export const idParamsSchema = z.object({ id: z.uuid().transform((id) => id.toLowerCase()) });

export function apiKeyToWire(key: ApiKey): z.infer<typeof apiKeySchema> {
  return {
    id: key.id,
    name: key.name,
    prefix: key.prefix,
    scopes: key.scopes,
    createdAt: key.createdAt.toISOString(),
    revokedAt: key.revokedAt?.toISOString() ?? null,
    expiresAt: key.expiresAt?.toISOString() ?? null,
    lastUsedAt: key.lastUsedAt?.toISOString() ?? null,
    rateLimit: key.rateLimit,
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
    rateLimit: tenant.rateLimit,
    suspendedAt: tenant.suspendedAt?.toISOString() ?? null,
  };
}

/** A catalogue model's name, as a request or a session names it (checked against the catalogue later). */
export const modelNameSchema = z.string().min(1).max(200);

/** A page of a list (`listPageFields`), named `id` in the OpenAPI document. */
export function pageSchema<Item extends z.ZodType>(item: Item, id: string) {
  return z
    .object({
      items: z.array(item),
      nextCursor: z.string().nullable().describe('Null on the last page'),
    })
    .meta({ id });
}

/** The query fields of a list that pages newest first (store/list-position.ts). */
export const listPageFields = {
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().min(1).max(200).optional().describe('nextCursor of the previous page'),
};
