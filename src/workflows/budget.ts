import type { Config } from '../config.js';
import { badRequest, type FieldProblem } from '../errors.js';
import type { TenantBudget } from '../tenancy/types.js';
import type { WorkflowBudget } from './types.js';

/** The caps a create request may ask for; each one it leaves out is the tenant's limit. */
export type RequestedBudget = Partial<Record<keyof WorkflowBudget, number>>;

const BUDGET_FIELDS = ['maxIterations', 'maxTokens', 'maxCostUsd'] as const;

/**
 * The largest value any cap may have, in the configuration, a tenant's
 * overrides and a request alike. A cost cap fits the numeric(14, 8)
 * columns (below 10^6) once rounded to their 8 decimals: 999999.999999999
 * would round to 10^6, so the bound is a whole dollar below it.
 */
export const BUDGET_LIMITS = {
  maxIterations: 100,
  maxTokens: 1_000_000_000_000,
  maxCostUsd: 999_999,
} as const satisfies WorkflowBudget;

/** The configured defaults (BUDGET_MAX_*); an unset token or cost default leaves it uncapped. */
export function configuredBudget(config: Config): WorkflowBudget {
  return {
    maxIterations: config.BUDGET_MAX_ITERATIONS,
    maxTokens: config.BUDGET_MAX_TOKENS ?? null,
    maxCostUsd: config.BUDGET_MAX_COST_USD ?? null,
  };
}

/** What a tenant's workflows may spend at most: its overrides, else the configured defaults. */
export function tenantLimits(defaults: WorkflowBudget, tenant: TenantBudget): WorkflowBudget {
  return {
    maxIterations: tenant.maxIterations ?? defaults.maxIterations,
    maxTokens: tenant.maxTokens ?? defaults.maxTokens,
    maxCostUsd: tenant.maxCostUsd ?? defaults.maxCostUsd,
  };
}

/**
 * The effective budget of a new workflow: per cap, the request's value
 * when it asks for one, else the tenant's limit. A request may lower a cap,
 * never raise it: a value above the limit is refused (400
 * `budget_exceeds_limit`, one field problem per cap, each naming the limit)
 * rather than clamped, so a client never believes it was given a cap it
 * does not have. Under an uncapped limit any value is a new cap.
 */
export function resolveBudget(input: {
  defaults: WorkflowBudget;
  tenant: TenantBudget;
  requested?: RequestedBudget;
}): WorkflowBudget {
  const limits = tenantLimits(input.defaults, input.tenant);
  const effective: WorkflowBudget = { ...limits };
  const problems: FieldProblem[] = [];
  for (const field of BUDGET_FIELDS) {
    const asked = input.requested?.[field];
    if (asked === undefined) continue;
    const limit = limits[field];
    if (limit !== null && asked > limit) {
      problems.push({
        field: `body.budget.${field}`,
        message: `at most ${limit}, this tenant's limit; leave it out to get the limit`,
      });
      continue;
    }
    effective[field] = asked;
  }
  if (problems.length > 0) {
    throw badRequest(
      'budget_exceeds_limit',
      'The requested budget exceeds what this tenant’s workflows may spend; a request may only lower its caps',
      problems,
    );
  }
  return effective;
}

/** A request's budget with no caps in it asks for nothing: the same request as one without it. */
export function isEmptyBudget(requested: RequestedBudget | undefined): boolean {
  return requested === undefined || BUDGET_FIELDS.every((field) => requested[field] === undefined);
}
