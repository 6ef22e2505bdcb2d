import { AppError, badRequest } from '../errors.js';
import type { Catalogue } from './catalogue.js';

export interface TenantModelSettings {
  defaultModel: string | null;
  /** null: every catalogue model. */
  allowedModels: string[] | null;
}

/**
 * Which model a turn uses: the request's, then the session's, then the
 * tenant's default, then the system default. A model the request names must
 * be one the tenant may use (400 otherwise); a session or tenant default
 * that the tenant may no longer use is skipped rather than failing.
 */
export function selectModel(input: {
  catalogue: Catalogue;
  tenant: TenantModelSettings;
  requested?: string | null;
  session?: string | null;
}): string {
  const { catalogue, tenant } = input;
  const known = new Set(catalogue.models.map((model) => model.name));
  const allowed = (name: string) =>
    known.has(name) && (tenant.allowedModels?.includes(name) ?? true);

  if (input.requested) {
    if (!known.has(input.requested)) {
      throw badRequest('unknown_model', `There is no model named "${input.requested}"`, [
        { field: 'body.model', message: `unknown model; known: ${[...known].join(', ')}` },
      ]);
    }
    if (!allowed(input.requested)) {
      throw badRequest(
        'model_not_allowed',
        `Your tenant may not use the model "${input.requested}"`,
        [
          {
            field: 'body.model',
            message: `not allowed; allowed: ${allowedNames(catalogue, tenant).join(', ')}`,
          },
        ],
      );
    }
    return input.requested;
  }
  for (const candidate of [input.session, tenant.defaultModel, catalogue.defaultModel]) {
    if (candidate && allowed(candidate)) return candidate;
  }
  const first = allowedNames(catalogue, tenant)[0];
  if (first) return first;
  throw new AppError({
    code: 'no_model_allowed',
    status: 409,
    userMessage: 'Your tenant may use none of the configured models; ask the operator to allow one',
    blame: 'configuration',
  });
}

/** The catalogue models a tenant may use, in catalogue order. */
export function allowedNames(catalogue: Catalogue, tenant: TenantModelSettings): string[] {
  return catalogue.models
    .map((model) => model.name)
    .filter((name) => tenant.allowedModels?.includes(name) ?? true);
}

/** Checks tenant settings against the catalogue before they are stored. */
export function validateTenantModels(
  catalogue: Catalogue,
  settings: Partial<TenantModelSettings>,
): void {
  const known = new Set(catalogue.models.map((model) => model.name));
  const fields = [];
  for (const [index, name] of (settings.allowedModels ?? []).entries()) {
    if (!known.has(name))
      fields.push({ field: `body.allowedModels.${index}`, message: `unknown model "${name}"` });
  }
  if (settings.defaultModel) {
    if (!known.has(settings.defaultModel)) {
      fields.push({
        field: 'body.defaultModel',
        message: `unknown model "${settings.defaultModel}"`,
      });
    } else if (settings.allowedModels && !settings.allowedModels.includes(settings.defaultModel)) {
      fields.push({ field: 'body.defaultModel', message: 'must be one of allowedModels' });
    }
  }
  if (fields.length > 0)
    throw badRequest(
      'unknown_model',
      'The tenant’s model settings name models that cannot be used',
      fields,
    );
}
