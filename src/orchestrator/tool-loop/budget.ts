import { type Catalogue, costOf } from '../../llm/catalogue.js';
import type { Usage } from '../../llm/types.js';
import { BUDGET_CAPS, type BudgetCap, type WorkflowBudget } from '../../workflows/types.js';
import type { PromptBudget } from '../system-prompt.js';
import type { LoopRun } from './types.js';

/**
 * The workflow's budget in the tool loop. Caps are checked before each
 * turn, not within one: a turn that started is never cut off (its tool
 * calls would dangle), so tokens and cost may end above their caps by the
 * turn that crossed them plus the last turn without tools that answers.
 * A cap guards against a runaway loop, not against one turn's price.
 */

/** What a workflow has spent against its budget so far. */
export interface BudgetSpent {
  /** Turns offered tools. */
  iterations: number;
  /** Input plus output tokens. */
  tokens: number;
  costUsd: number;
}

/** The first cap `spent` has reached, iterations before tokens before cost; null when none. */
export function reachedCap(budget: WorkflowBudget, spent: BudgetSpent): BudgetCap | null {
  if (spent.iterations >= budget.maxIterations) return 'iteration_cap';
  if (budget.maxTokens !== null && spent.tokens >= budget.maxTokens) return 'token_budget';
  // At the 8 decimals the usage keeps: $0.70 + $0.10 sums to 0.7999999999999999 in binary.
  if (budget.maxCostUsd !== null && roundUsd(spent.costUsd) >= budget.maxCostUsd) {
    return 'cost_budget';
  }
  return null;
}

export function isBudgetCap(reason: string): reason is BudgetCap {
  return (BUDGET_CAPS as readonly string[]).includes(reason);
}

/** This run's turns plus what the workflow's earlier runs spent (before a pause). */
export function spentBy(run: LoopRun): BudgetSpent {
  const before = run.options.spentBefore;
  const usage = run.usage;
  return {
    iterations: run.iterations,
    tokens: before.tokens + (usage ? usage.inputTokens + usage.outputTokens : 0),
    costUsd: before.costUsd + run.costUsd,
  };
}

/**
 * How close the budget is to its end for the turn being prepared, for the
 * model's prompt: that turn is counted among the iterations already, and
 * is left too.
 */
export function budgetLeft(run: LoopRun): PromptBudget {
  const { budget } = run.options;
  const spent = spentBy(run);
  return {
    iterationsLeft: budget.maxIterations - spent.iterations + 1,
    tokensLow: budget.maxTokens !== null && budget.maxTokens - spent.tokens <= budget.maxTokens / 5,
  };
}

/**
 * Called before each turn. Once a cap is reached the loop wraps up: a
 * `warning` event names the cap and the next turn, offered no tools, is the
 * last. Announced once; a run already wrapping up is left alone.
 */
export async function enforceBudget(run: LoopRun): Promise<void> {
  if (run.wrappingUp) return;
  const { budget } = run.options;
  const spent = spentBy(run);
  const cap = reachedCap(budget, spent);
  if (!cap) return;
  run.wrappingUp = cap;
  run.options.tracker.enqueue(
    'warning',
    null,
    'info',
    capWarning(cap, budget, spent, 'answering from what was gathered, without more tools.'),
  );
}

/** The `warning` event's detail naming a reached cap; `then` says what the workflow does instead. */
export function capWarning(
  cap: BudgetCap,
  budget: WorkflowBudget,
  spent: BudgetSpent,
  then: string,
): Record<string, unknown> {
  switch (cap) {
    case 'iteration_cap':
      return {
        code: cap,
        message: `The tool loop reached its cap of ${budget.maxIterations} iterations; ${then}`,
        maxIterations: budget.maxIterations,
        iterations: spent.iterations,
      };
    case 'token_budget':
      return {
        code: cap,
        message: `The workflow used ${spent.tokens} tokens, reaching its budget of ${budget.maxTokens}; ${then}`,
        maxTokens: budget.maxTokens,
        tokens: spent.tokens,
      };
    case 'cost_budget':
      return {
        code: cap,
        message: `The workflow cost $${roundUsd(spent.costUsd)}, reaching its budget of $${budget.maxCostUsd}; ${then}`,
        maxCostUsd: budget.maxCostUsd,
        costUsd: roundUsd(spent.costUsd),
      };
  }
}

/** To the 8 decimals the workflow's usage keeps, so the event and GET agree. */
function roundUsd(dollars: number): number {
  return Math.round(dollars * 1e8) / 1e8;
}

/** What a turn of a catalogue model cost, at its prices; 0 for a model the catalogue lacks. */
export function turnCost(catalogue: Catalogue): (model: string, usage: Usage) => number {
  const entries = new Map(catalogue.models.map((entry) => [entry.name, entry]));
  return (model, usage) => {
    const entry = entries.get(model);
    return entry ? costOf(entry, usage) : 0;
  };
}
