import { createHash } from 'node:crypto';
import { AppError } from '../errors.js';
import { stableJson } from '../stable-json.js';
import { isEmptyBudget } from './budget.js';
import type { NewWorkflow } from './service.js';

/**
 * What makes a create idempotent (service.ts): the request's hash, stored
 * with the workflow under its Idempotency-Key, the unique violation that
 * tells a create its key was taken meanwhile, and what a create answers
 * when the key keeps being taken and freed under it.
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

/**
 * Inserts one keyed create makes at most. An insert that finds the key
 * taken reads the workflow that has it; one deleted in between (finished,
 * by the retention sweep or its session's delete) left the key free, so
 * the create inserts again. A second try finds the key free or held by a
 * concurrent create's workflow, queued, which no delete removes before it
 * ends; a third is for one that ended and was deleted within that time.
 */
export const KEYED_INSERT_TRIES = 3;

/**
 * Every insert found the key taken and every read found it free again.
 * Nothing was written, and a retry with the same key is safe: a 409 that
 * says so, as the IETF Idempotency-Key draft answers a request whose key
 * another request is still working with.
 */
export function idempotencyKeyBusy(cause: unknown): AppError {
  return new AppError({
    code: 'idempotency_key_busy',
    status: 409,
    userMessage:
      'The workflows of this Idempotency-Key were created and deleted while this request ran; retry it',
    blame: 'user',
    retryable: true,
    headers: { 'Retry-After': '1' },
    cause,
  });
}
