import type { WorkflowBudget } from '../../workflows/types.js';
import { capWarning, reachedCap } from '../tool-loop/budget.js';
import type { PipelineRun } from './run-pipeline.js';
import { spentSoFar } from './run-stage.js';

/** The caps that end a pipeline; iterations are capped per stage, by the stage's tool loop. */
export type SpentCap = 'token_budget' | 'cost_budget';

/** The token or cost cap `spent` has reached (tokens first); null when none. */
export function spentCapOf(
  budget: WorkflowBudget,
  spent: { tokens: number; costUsd: number },
): SpentCap | null {
  const cap = reachedCap(budget, { iterations: 0, ...spent });
  return cap === 'token_budget' || cap === 'cost_budget' ? cap : null;
}

/**
 * The workflow's token or cost cap, once what it has spent reached it. The
 * first time, a `warning` names it, `then` saying what the workflow does
 * instead; a cap the run knows was named (`run.announcedCap`) is not named
 * again, so a synthesis retried after a budget's failed synthesis does not
 * repeat it. A cap reached later (cost, then tokens) is named too.
 */
export function announceSpentCap(run: PipelineRun, then: string): SpentCap | null {
  const { budget, tracker } = run.input.context;
  const spent = spentSoFar(run);
  const cap = spentCapOf(budget, spent);
  if (cap === null || cap === run.announcedCap) return cap;
  run.announcedCap = cap;
  tracker.enqueue(
    'warning',
    null,
    'info',
    capWarning(cap, budget, { iterations: 0, ...spent }, then),
  );
  return cap;
}
