import type { LlmError, LlmErrorKind } from '../errors.js';
import type { TokenCounts } from '../estimate-tokens.js';
import type { InputEstimate } from '../output-room.js';
import type { ModelRequest, StreamPart, Usage } from '../types.js';

/** Who a model call is made for; carried into the usage ledger. */
export interface CallContext {
  tenantId: string;
  workflowId?: string;
}

export interface RouterCall {
  /** Catalogue name of the first model of the chain. */
  model: string;
  /**
   * Its `maxOutputTokens` is what the caller wants at most (the model's
   * maximum when unset): each attempt asks for no more than that, its
   * model's maximum and the room the input leaves in its model's window.
   */
  request: ModelRequest;
  /**
   * The caller's estimate of the request's input, when it made one (the
   * tool loop's context checks do): what fits each attempt's output
   * without counting the request again, for models of its kind.
   */
  input?: InputEstimate;
  /** Exact counts the caller keeps across its requests, for those the router makes. */
  tokenCounts?: TokenCounts;
  signal: AbortSignal;
  context: CallContext;
  /** Retries and fallbacks, for the WorkflowTracker's llm_retry and llm_fallback events. */
  onEvent?: (event: RouterEvent) => void;
}

/**
 * One turn's parts, as `router.stream` returns them, and the model
 * answering it. A turn may have several `usage` parts, one per attempt
 * that reported usage: a failed attempt's (its provider reported usage
 * before the failure) comes right after its failure, before the next
 * attempt's parts; each is priced at `model` as it is read.
 */
export interface RouterStream extends AsyncIterableIterator<StreamPart> {
  /**
   * Catalogue name of the model of the turn's latest attempt: once the
   * stream has ended, the one that answered the turn (or whose failure
   * ended it), which after a fallback is not the one asked for; while a
   * `usage` part is read, the model of the attempt that used it. The
   * model asked for until an attempt starts.
   */
  readonly model: string;
}

export interface RetryPolicy {
  /** Attempts across the whole chain, retries and fallbacks together. */
  maxTotalAttempts: number;
  /** Retries of one model before falling through to the next. */
  maxRetriesPerModel: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** A provider asking to wait longer than this is fallen through at once. */
  maxRetryAfterMs: number;
  /**
   * Time an attempt may take to start its answer: its first content of
   * any kind (a text delta, the start of a tool call), not its first
   * part, which a tool call becomes only once its arguments are complete.
   */
  attemptTimeoutMs: number;
  /** Time an attempt may take to the end of its stream. */
  streamMaxMs: number;
  breakerFailureThreshold: number;
  breakerProbeIntervalMs: number;
}

export type RouterEvent =
  | { type: 'retry'; model: string; attempt: number; delayMs: number; error: LlmError }
  | {
      type: 'fallback';
      from: string;
      to: string;
      /**
       * `context_window`: `from`'s window cannot hold the request with the
       * least output (output-room.ts), so it was passed over unasked.
       */
      reason: 'error' | 'context_length' | 'circuit_open' | 'context_window';
      error?: LlmError;
    };

/** One attempt, as the usage ledger stores it. */
export interface AttemptRecord {
  context: CallContext;
  /** Catalogue name. */
  model: string;
  provider: string;
  modelId: string;
  /** 1-based count of attempts within this turn. */
  attempt: number;
  usage: Usage;
  costUsd: number;
  latencyMs: number;
  /** Time to the start of the answer (its first content); null when it never started. */
  ttftMs: number | null;
  outcome: 'ok' | LlmErrorKind;
  startedAt: Date;
}
