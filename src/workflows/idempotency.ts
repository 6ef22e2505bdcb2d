import { createHash } from 'node:crypto';
import { stableJson } from '../stable-json.js';
import { isEmptyBudget } from './budget.js';
import type { NewWorkflow } from './service.js';

/**
 * What makes a create idempotent (service.ts): the request's hash, stored
 * with the workflow under its Idempotency-Key, and the unique violation
 * that tells a create its key was taken meanwhile.
 */

/** The Postgres error code of a unique violation, and the index that makes keys unique per tenant. */
const UNIQUE_VIOLATION = '23505';
const IDEMPOTENCY_INDEX = 'workflows_idempotency';

/**
 * SHA-256 of the request as validated (defaults applied, object keys
 * sorted), so that a retry whose JSON differs only in key order or in
 * spelling out a default counts as the same request.
 */
export function hashRequest(input: NewWorkflow): string {
  const canonical = stableJson({
    input: input.input,
    sessionId: input.sessionId ?? null,
    mode: input.mode,
    model: input.model ?? null,
    tools: input.tools ?? [],
    metadata: input.metadata ?? {},
    // Left out when it asks for nothing, so a request without caps hashes as it did before budgets.
    budget: isEmptyBudget(input.budget) ? undefined : input.budget,
  });
  return createHash('sha256').update(canonical).digest('hex');
}

export function isIdempotencyKeyTaken(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, constraint } = error as { code?: unknown; constraint?: unknown };
  return code === UNIQUE_VIOLATION && constraint === IDEMPOTENCY_INDEX;
}
