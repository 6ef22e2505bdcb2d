import { LlmError } from './errors.js';

/**
 * Characters a token stands for, at most, for bounding a model's output:
 * o200k's average is ~4 and its longest tokens are whitespace and
 * punctuation runs of a few dozen.
 */
const MAX_CHARS_PER_TOKEN = 64;

/**
 * The most characters of output, text and tool-call arguments together, a
 * call of `maxOutputTokens` can honestly produce. A provider that ignores
 * its limits went far past it (there were 40 MB of text for 256 tokens, all
 * stored); the router fails the attempt there as a cut-off answer.
 */
export function maxOutputChars(maxOutputTokens: number): number {
  return maxOutputTokens * MAX_CHARS_PER_TOKEN;
}

/** Why an output past `maxOutputChars` was cut off; `what` names what ran over. */
export function overlongOutputDetail(what: string, maxOutputTokens: number): string {
  return `${what} passed ${maxOutputChars(maxOutputTokens)} characters, past its ${maxOutputTokens} tokens`;
}

export interface ArgumentBudgetOptions {
  provider: string;
  model: string;
  /** The model's maximum output, as the router bounds it (its catalogue entry's). */
  maxOutputTokens: number;
}

/**
 * For an adapter assembling one turn's tool-call arguments from the stream:
 * a call's arguments come out whole, after its last fragment, so the router
 * sees their size only once all of them are in memory. Counted here as they
 * arrive, a runaway provider's arguments fail the call at the same bound
 * instead (`stream_interrupted`, as the router fails an over-long text).
 */
export class ArgumentBudget {
  readonly #maxChars: number;
  #chars = 0;

  constructor(private readonly options: ArgumentBudgetOptions) {
    this.#maxChars = maxOutputChars(options.maxOutputTokens);
  }

  /** Counts one fragment; throws the `LlmError` that ends the call past the bound. */
  add(fragment: string): void {
    this.#chars += fragment.length;
    if (this.#chars <= this.#maxChars) return;
    const { provider, model, maxOutputTokens } = this.options;
    throw new LlmError({
      kind: 'stream_interrupted',
      provider,
      model,
      detail: overlongOutputDetail('the tool-call arguments', maxOutputTokens),
    });
  }
}
