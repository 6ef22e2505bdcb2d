import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import type { ProviderKind } from './catalogue.js';
import { toolParametersJsonSchema } from './tool-arguments.js';
import type { Message, ModelRequest } from './types.js';

/**
 * Token estimates before a call, for budgets and the context-window checks
 * of the tool loop. OpenAI-family models are counted exactly with the
 * bundled o200k_base encoding (GPT-4o and later). Other vendors' tokenisers
 * are not public; for them we use about 3.5 characters per token, which for
 * English prose and code overestimates Claude's count slightly: the safe
 * side for a budget.
 */
export const CHARACTERS_PER_TOKEN = 3.5;
/** Per-message framing (role markers, separators) that the text alone does not show. */
const MESSAGE_OVERHEAD_TOKENS = 4;

/**
 * Exact counts already made, by text, kept by one caller across its
 * estimates: the tool loop estimates every turn's request, which repeats
 * the system prompt, the tools and the history of the turns before, and
 * tokenising them again was ~4% of a workflow's CPU (bench/simple-path).
 */
export type TokenCounts = Map<string, number>;

export function estimateTextTokens(text: string, kind: ProviderKind, counts?: TokenCounts): number {
  if (text.length === 0) return 0;
  if (kind !== 'openai') return Math.ceil(text.length / CHARACTERS_PER_TOKEN);
  const known = counts?.get(text);
  if (known !== undefined) return known;
  const count = countTokensBounded(text);
  counts?.set(text, count);
  return count;
}

/**
 * How long a run of letters, of spaces or of punctuation is counted in one
 * piece. The encoder takes such a run as one piece, whose merging costs the
 * square of its length: 100,000 letters took 3.5 s, 200,000 17 s, with the
 * replica's event loop blocked throughout (a model's argument, a tool's
 * description). Counted in pieces of this length it takes ~70 ms for
 * 100,000 random letters, and differs from the exact count by under 1%.
 */
const LONGEST_COUNTED_RUN = 256;
const LONG_RUN = new RegExp(
  `[\\p{L}\\p{M}]{${LONGEST_COUNTED_RUN},}|\\s{${LONGEST_COUNTED_RUN},}|[^\\s\\p{L}\\p{M}\\p{N}]{${LONGEST_COUNTED_RUN},}`,
  'gu',
);

/** o200k_base's count, with long runs counted piece by piece (LONGEST_COUNTED_RUN). */
function countTokensBounded(text: string): number {
  if (text.length <= LONGEST_COUNTED_RUN) return countTokens(text);
  let total = 0;
  let from = 0;
  for (const run of text.matchAll(LONG_RUN)) {
    total += countTokens(text.slice(from, run.index));
    for (let piece = 0; piece < run[0].length; piece += LONGEST_COUNTED_RUN) {
      total += countTokens(run[0].slice(piece, piece + LONGEST_COUNTED_RUN));
    }
    from = run.index + run[0].length;
  }
  return total + countTokens(text.slice(from));
}

export function estimateRequestTokens(
  request: ModelRequest,
  kind: ProviderKind,
  counts?: TokenCounts,
): number {
  return sumRequestTokens(request, (text) => estimateTextTokens(text, kind, counts));
}

/**
 * At least `estimateRequestTokens`, without tokenising: an o200k token
 * stands for one UTF-8 byte or more, so a text has no more tokens than
 * bytes. For a request far from a limit, it answers "under" at the cost
 * of a byte count.
 */
export function upperBoundRequestTokens(request: ModelRequest, kind: ProviderKind): number {
  if (kind !== 'openai') return estimateRequestTokens(request, kind);
  return sumRequestTokens(request, (text) => Buffer.byteLength(text));
}

function sumRequestTokens(request: ModelRequest, tokensOf: (text: string) => number): number {
  let total = 0;
  if (request.system) {
    total += tokensOf(request.system.stable) + MESSAGE_OVERHEAD_TOKENS;
    if (request.system.volatile) total += tokensOf(request.system.volatile);
  }
  for (const message of request.messages) {
    total += tokensOf(messageText(message)) + MESSAGE_OVERHEAD_TOKENS;
  }
  for (const tool of request.tools ?? []) {
    const schema = JSON.stringify(toolParametersJsonSchema(tool));
    total += tokensOf(`${tool.name} ${tool.description} ${schema}`);
  }
  return total;
}

export function estimateMessageTokens(
  message: Message,
  kind: ProviderKind,
  counts?: TokenCounts,
): number {
  return estimateTextTokens(messageText(message), kind, counts) + MESSAGE_OVERHEAD_TOKENS;
}

function messageText(message: Message): string {
  return message.role === 'assistant'
    ? message.content +
        message.toolCalls.map((call) => call.name + JSON.stringify(call.arguments)).join('')
    : message.content;
}
