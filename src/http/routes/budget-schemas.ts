import { z } from 'zod';
import { BUDGET_LIMITS } from '../../workflows/budget.js';

/** Wire shapes of budgets: what a request asks for, what a workflow has, what a tenant overrides. */

const maxIterations = z
  .number()
  .int()
  .min(1)
  .max(BUDGET_LIMITS.maxIterations)
  .describe('Model turns with tools; at the cap one last turn without tools answers');
const maxTokens = z
  .number()
  .int()
  .min(1)
  .max(BUDGET_LIMITS.maxTokens)
  .describe('Input plus output tokens of all the workflow’s model turns');
// The tenant column keeps 8 decimals: a smaller cap would be stored as 0.
const maxCostUsd = z
  .number()
  .min(0.000_000_01)
  .max(BUDGET_LIMITS.maxCostUsd)
  .describe('US dollars the workflow’s model turns may cost, at the catalogue’s prices');

export const requestedBudgetSchema = z
  .object({
    maxIterations: maxIterations.optional(),
    maxTokens: maxTokens.optional(),
    maxCostUsd: maxCostUsd.optional(),
  })
  .strict()
  .meta({ id: 'RequestedBudget' })
  .describe(
    'Lower caps for this workflow. Each cap left out is the tenant’s limit (its override, else the configured default); ' +
      'a value above that limit is refused with 400 `budget_exceeds_limit` naming the field, never clamped. ' +
      'Caps are checked before each model turn: once one is reached, a `warning` event names it and one last turn ' +
      'without tools gives a best-effort answer, so tokens and cost may end somewhat above their caps by that turn.',
  );

/** Responses carry stored values as they are: no bounds, which a later configuration may have changed. */
export const workflowBudgetSchema = z
  .object({
    maxIterations: z.number().int().describe('Model turns with tools'),
    maxTokens: z.number().int().nullable().describe('Input plus output tokens; null: uncapped'),
    maxCostUsd: z.number().nullable().describe('US dollars; null: uncapped'),
  })
  .meta({ id: 'WorkflowBudget' })
  .describe('The caps this workflow runs under, resolved when it was created');

export const tenantBudgetSchema = z
  .object({
    maxIterations: z.number().int().nullable(),
    maxTokens: z.number().int().nullable(),
    maxCostUsd: z.number().nullable(),
  })
  .meta({ id: 'TenantBudget' })
  .describe(
    'Caps on the tenant’s workflows; null: the configured default (BUDGET_MAX_*). Requests may only lower them.',
  );

export const tenantBudgetChangesSchema = z
  .object({
    maxIterations: maxIterations.nullable().optional(),
    maxTokens: maxTokens.nullable().optional(),
    maxCostUsd: maxCostUsd.nullable().optional(),
  })
  .strict()
  .describe(
    'Budget overrides for the tenant’s workflows: a cap left out stays as it is, null returns it to the configured default. ' +
      'Workflows already created keep the budget they were created with.',
  );
