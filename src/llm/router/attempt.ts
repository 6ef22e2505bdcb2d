import { LlmError } from '../errors.js';
import {
  emptyUsage,
  type LanguageModel,
  type ModelRequest,
  type StreamPart,
  type Usage,
} from '../types.js';

export interface AttemptOutcome {
  usage: Usage;
  ttftMs: number | null;
  /** Whether any part reached the consumer. */
  yieldedAny: boolean;
}

/**
 * Runs one attempt: the model's stream under its own AbortController, which
 * follows the caller's signal and fires a timeout when no first part comes
 * within `timeoutMs`. Yields the parts; throws an LlmError on failure, with
 * `outcome` filled in for the ledger either way.
 */
export async function* runAttempt(options: {
  model: LanguageModel;
  request: ModelRequest;
  signal: AbortSignal;
  timeoutMs: number;
  outcome: AttemptOutcome;
}): AsyncGenerator<StreamPart> {
  const { model, outcome } = options;
  const controller = new AbortController();
  const follow = () => controller.abort(options.signal.reason);
  if (options.signal.aborted) follow();
  options.signal.addEventListener('abort', follow, { once: true });
  const started = performance.now();
  const firstPartTimer = setTimeout(() => {
    controller.abort(
      new LlmError({
        kind: 'timeout',
        provider: model.provider,
        model: model.modelId,
        detail: `no answer within ${options.timeoutMs} ms`,
      }),
    );
  }, options.timeoutMs);
  try {
    for await (const part of model.stream(options.request, { signal: controller.signal })) {
      if (outcome.ttftMs === null) {
        outcome.ttftMs = performance.now() - started;
        clearTimeout(firstPartTimer);
      }
      if (part.type === 'usage') outcome.usage = part.usage;
      outcome.yieldedAny = true;
      yield part;
    }
  } catch (error) {
    throw asLlmError(error, model);
  } finally {
    clearTimeout(firstPartTimer);
    options.signal.removeEventListener('abort', follow);
  }
}

export function newOutcome(): AttemptOutcome {
  return { usage: emptyUsage(), ttftMs: null, yieldedAny: false };
}

/** Adapters throw LlmError; anything else is a bug in one, reported as a provider-side failure that is not retried. */
function asLlmError(error: unknown, model: LanguageModel): LlmError {
  if (error instanceof LlmError) return error;
  return new LlmError({
    kind: 'invalid_request',
    provider: model.provider,
    model: model.modelId,
    detail: `adapter failure: ${error instanceof Error ? error.message : String(error)}`,
    cause: error,
  });
}
