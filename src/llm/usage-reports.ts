import { sql } from 'kysely';
import { daysBefore } from '../days.js';
import { AppError, badRequest } from '../errors.js';
import { type Db, inTransaction, isStatementCancelled } from '../store/database.js';
import {
  llmCallsRepository,
  USAGE_GROUPINGS,
  type UsageGrouping,
  type UsageSumRow,
} from '../store/llm-calls.js';

export { USAGE_GROUPINGS };

/**
 * What a tenant's model calls used and cost over a time range, added up
 * from the usage ledger (`llm_calls`, one row per attempt, retries and
 * fallbacks included): what `GET /v1/usage` and an operator's
 * `GET /v1/tenants/:id/usage` answer.
 */

/** The range a report covers when the request gives none: the 30 days up to now. */
export const USAGE_RANGE_DEFAULT_DAYS = 30;
/** The longest range one report may cover: each reads every ledger row of it. */
export const USAGE_RANGE_MAX_DAYS = 366;

export interface UsageSums {
  /** Model call attempts, failed ones included. */
  calls: number;
  /** Attempts that ended in an error (their usage reported before it is counted too). */
  failedCalls: number;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  cacheWriteTokens: number;
  /** At the catalogue's prices when each call was made. */
  costUsd: number;
}

export interface UsageReport {
  /** Calls that started at or after `from` and before `to`. */
  from: Date;
  to: Date;
  groupBy: UsageGrouping | null;
  totals: UsageSums;
  /** One per model, provider or UTC day (`key`) with calls in the range, in `key` order; empty without `groupBy`. */
  groups: (UsageSums & { key: string })[];
}

export interface UsageReportQuery {
  from?: Date;
  to?: Date;
  groupBy?: UsageGrouping;
}

/**
 * `timeoutMs` (USAGE_REPORT_TIMEOUT_MS) bounds each report's statement: a
 * tenant with millions of calls in its range would otherwise hold a pooled
 * connection for as long as the sum takes, and a few such requests at once
 * would leave the workflows none.
 */
export function createUsageReports(db: Db, options: { timeoutMs: number }) {
  return {
    /**
     * 400 `invalid_time_range` when `from` is not before `to`, or they are
     * more than USAGE_RANGE_MAX_DAYS apart; 503 `usage_report_timeout` when
     * the sum takes longer than the timeout.
     */
    async summarize(tenantId: string, query: UsageReportQuery): Promise<UsageReport> {
      const to = query.to ?? new Date();
      const from = query.from ?? daysBefore(to, USAGE_RANGE_DEFAULT_DAYS);
      checkRange(from, to);
      const rows = await inTransaction(db, async (tx) => {
        // SET LOCAL: the transaction's own, so it holds through a transaction-mode pooler.
        await sql`SELECT set_config('statement_timeout', ${String(options.timeoutMs)}, true)`.execute(
          tx,
        );
        return llmCallsRepository(tx).summarize({
          tenantId,
          from,
          to,
          ...(query.groupBy ? { groupBy: query.groupBy } : {}),
        });
      }).catch((error: unknown) => {
        if (!isStatementCancelled(error)) throw error;
        throw new AppError({
          code: 'usage_report_timeout',
          status: 503,
          userMessage: `The report took longer than ${options.timeoutMs} ms (USAGE_REPORT_TIMEOUT_MS); ask for a shorter range`,
          blame: 'user',
          retryable: false,
          cause: error,
        });
      });
      const total = rows.find((row) => row.is_total);
      return {
        from,
        to,
        groupBy: query.groupBy ?? null,
        totals: sumsOf(total),
        groups: rows.flatMap((row) =>
          row.is_total || row.key === null ? [] : [{ key: row.key, ...sumsOf(row) }],
        ),
      };
    },
  };
}

export type UsageReports = ReturnType<typeof createUsageReports>;

function checkRange(from: Date, to: Date): void {
  const problem =
    from.getTime() >= to.getTime()
      ? '`from` must be before `to`'
      : from.getTime() < daysBefore(to, USAGE_RANGE_MAX_DAYS).getTime()
        ? `a report covers at most ${USAGE_RANGE_MAX_DAYS} days`
        : undefined;
  if (problem === undefined) return;
  throw badRequest('invalid_time_range', `The time range is not one a report covers: ${problem}`, [
    { field: 'query.from', message: problem },
  ]);
}

function sumsOf(row: UsageSumRow | undefined): UsageSums {
  return {
    calls: Number(row?.calls ?? 0),
    failedCalls: Number(row?.failed_calls ?? 0),
    inputTokens: Number(row?.input_tokens ?? 0),
    outputTokens: Number(row?.output_tokens ?? 0),
    cachedInputTokens: Number(row?.cached_input_tokens ?? 0),
    cacheWriteTokens: Number(row?.cache_write_tokens ?? 0),
    costUsd: Number(row?.cost_usd ?? 0),
  };
}
