import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { AppError } from '../../src/errors.js';
import { reachedCap } from '../../src/orchestrator/tool-loop/budget.js';
import type { TenantBudget } from '../../src/tenancy/types.js';
import { configuredBudget, resolveBudget } from '../../src/workflows/budget.js';
import { hashRequest } from '../../src/workflows/idempotency.js';
import type { WorkflowBudget } from '../../src/workflows/types.js';

const defaults: WorkflowBudget = { maxIterations: 10, maxTokens: 50_000, maxCostUsd: null };
const noOverrides: TenantBudget = { maxIterations: null, maxTokens: null, maxCostUsd: null };

function refusal(run: () => unknown): AppError {
  try {
    run();
  } catch (error) {
    if (error instanceof AppError) return error;
    throw error;
  }
  throw new Error('expected the budget to be refused');
}

describe('resolveBudget', () => {
  it('without a request or overrides, is the configured defaults', () => {
    expect(resolveBudget({ defaults, tenant: noOverrides })).toEqual(defaults);
  });

  it('a tenant override replaces the default, higher or lower; null inherits it', () => {
    const tenant: TenantBudget = { maxIterations: 30, maxTokens: 1000, maxCostUsd: 2 };
    expect(resolveBudget({ defaults, tenant })).toEqual({
      maxIterations: 30,
      maxTokens: 1000,
      maxCostUsd: 2,
    });
    expect(resolveBudget({ defaults, tenant: { ...noOverrides, maxTokens: 7 } })).toEqual({
      ...defaults,
      maxTokens: 7,
    });
  });

  it('a request lowers the caps it names and keeps the limit for the others', () => {
    expect(
      resolveBudget({ defaults, tenant: noOverrides, requested: { maxIterations: 3 } }),
    ).toEqual({ maxIterations: 3, maxTokens: 50_000, maxCostUsd: null });
    // Equal to the limit is not a raise.
    expect(
      resolveBudget({ defaults, tenant: noOverrides, requested: { maxTokens: 50_000 } }),
    ).toEqual(defaults);
  });

  it('a request may set a cap where the limit is uncapped', () => {
    expect(
      resolveBudget({ defaults, tenant: noOverrides, requested: { maxCostUsd: 0.25 } }),
    ).toMatchObject({ maxCostUsd: 0.25 });
  });

  it('a request above a limit is refused with 400 budget_exceeds_limit naming every such field', () => {
    const error = refusal(() =>
      resolveBudget({
        defaults,
        tenant: { ...noOverrides, maxCostUsd: 1 },
        requested: { maxIterations: 11, maxTokens: 100, maxCostUsd: 1.5 },
      }),
    );
    expect(error).toMatchObject({ status: 400, code: 'budget_exceeds_limit' });
    expect(error.fields).toEqual([
      { field: 'body.budget.maxIterations', message: expect.stringContaining('at most 10') },
      { field: 'body.budget.maxCostUsd', message: expect.stringContaining('at most 1') },
    ]);
  });

  it("a request above the default but within the tenant's raised override is accepted", () => {
    expect(
      resolveBudget({
        defaults,
        tenant: { ...noOverrides, maxIterations: 40 },
        requested: { maxIterations: 25 },
      }),
    ).toMatchObject({ maxIterations: 25 });
  });
});

describe('reachedCap', () => {
  const budget: WorkflowBudget = { maxIterations: 4, maxTokens: 100, maxCostUsd: 0.5 };

  it('is null below every cap, and names the cap once spent reaches it', () => {
    expect(reachedCap(budget, { iterations: 3, tokens: 99, costUsd: 0.49 })).toBeNull();
    expect(reachedCap(budget, { iterations: 4, tokens: 0, costUsd: 0 })).toBe('iteration_cap');
    expect(reachedCap(budget, { iterations: 0, tokens: 100, costUsd: 0 })).toBe('token_budget');
    expect(reachedCap(budget, { iterations: 0, tokens: 0, costUsd: 0.5 })).toBe('cost_budget');
  });

  it('names iterations before tokens before cost when several are reached', () => {
    expect(reachedCap(budget, { iterations: 9, tokens: 900, costUsd: 9 })).toBe('iteration_cap');
    expect(reachedCap(budget, { iterations: 0, tokens: 900, costUsd: 9 })).toBe('token_budget');
  });

  it('counts cost at the 8 decimals the usage keeps: $0.70 + $0.10 reaches a cap of $0.80', () => {
    const cents = { ...budget, maxCostUsd: 0.8 };
    expect(0.7 + 0.1).toBeLessThan(0.8);
    expect(reachedCap(cents, { iterations: 0, tokens: 0, costUsd: 0.7 + 0.1 })).toBe('cost_budget');
    expect(reachedCap(cents, { iterations: 0, tokens: 0, costUsd: 0.79999999 })).toBeNull();
  });

  it('never trips an uncapped dimension', () => {
    const uncapped: WorkflowBudget = { maxIterations: 4, maxTokens: null, maxCostUsd: null };
    expect(reachedCap(uncapped, { iterations: 0, tokens: 1e12, costUsd: 1e6 })).toBeNull();
  });
});

describe('budget configuration', () => {
  it('defaults to 10 iterations and no token or cost cap', () => {
    expect(configuredBudget(loadConfig({}))).toEqual({
      maxIterations: 10,
      maxTokens: null,
      maxCostUsd: null,
    });
  });

  it('reads the three caps, the cost as a decimal', () => {
    const config = loadConfig({
      BUDGET_MAX_ITERATIONS: '5',
      BUDGET_MAX_TOKENS: '200000',
      BUDGET_MAX_COST_USD: '0.75',
    });
    expect(configuredBudget(config)).toEqual({
      maxIterations: 5,
      maxTokens: 200_000,
      maxCostUsd: 0.75,
    });
  });

  it('refuses a zero or malformed cost, and the old LOOP_MAX_ITERATIONS by its new name', () => {
    for (const [env, problem] of [
      [{ BUDGET_MAX_COST_USD: '0' }, /^BUDGET_MAX_COST_USD: /],
      [{ BUDGET_MAX_COST_USD: '1e3' }, /^BUDGET_MAX_COST_USD: /],
      [{ LOOP_MAX_ITERATIONS: '4' }, /^LOOP_MAX_ITERATIONS: renamed to BUDGET_MAX_ITERATIONS/],
    ] as const) {
      let problems: string[] = [];
      try {
        loadConfig(env);
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        problems = error.problems;
      }
      expect(problems, JSON.stringify(env)).toEqual([expect.stringMatching(problem)]);
    }
  });
});

describe('the idempotency hash of a create request', () => {
  const request = { input: 'What is 6 * 7?', mode: 'auto' as const };

  it('is the same without a budget and with an empty one', () => {
    expect(hashRequest({ ...request, budget: {} })).toBe(hashRequest(request));
  });

  it('differs when the budget differs', () => {
    const low = hashRequest({ ...request, budget: { maxTokens: 100 } });
    expect(low).not.toBe(hashRequest(request));
    expect(low).not.toBe(hashRequest({ ...request, budget: { maxTokens: 200 } }));
  });
});
