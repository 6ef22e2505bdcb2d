-- Budgets: per-workflow caps on iterations, tokens and cost.

-- A tenant's overrides of the configured defaults (BUDGET_MAX_*); NULL
-- inherits the default. Set by operator admins with PATCH /v1/tenants/:id.
ALTER TABLE tenants ADD COLUMN budget_max_iterations integer CHECK (budget_max_iterations > 0);
-- Input plus output tokens of all the workflow's model turns.
ALTER TABLE tenants ADD COLUMN budget_max_tokens bigint CHECK (budget_max_tokens > 0);
ALTER TABLE tenants ADD COLUMN budget_max_cost_usd numeric(14, 8) CHECK (budget_max_cost_usd > 0);

-- The effective budget resolved when the workflow was created
-- ({"maxIterations", "maxTokens", "maxCostUsd"}, the last two null when
-- uncapped), so a run resumed on any replica, after any configuration or
-- tenant change, enforces the caps the client was given. NULL on
-- workflows created before budgets: their runs use the configured defaults.
ALTER TABLE workflows ADD COLUMN budget jsonb CHECK (budget IS NULL OR jsonb_typeof(budget) = 'object');
