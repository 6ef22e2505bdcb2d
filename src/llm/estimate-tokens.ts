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

export function estimateTextTokens(text: string, kind: ProviderKind): number {
  if (text.length === 0) return 0;
  if (kind === 'openai') return countTokens(text);
  return Math.ceil(text.length / CHARACTERS_PER_TOKEN);
}

export function estimateRequestTokens(request: ModelRequest, kind: ProviderKind): number {
  let total = 0;
  if (request.system) {
    total += estimateTextTokens(request.system.stable, kind) + MESSAGE_OVERHEAD_TOKENS;
    if (request.system.volatile) total += estimateTextTokens(request.system.volatile, kind);
  }
  for (const message of request.messages) total += estimateMessageTokens(message, kind);
  for (const tool of request.tools ?? []) {
    const schema = JSON.stringify(toolParametersJsonSchema(tool));
    total += estimateTextTokens(`${tool.name} ${tool.description} ${schema}`, kind);
  }
  return total;
}

export function estimateMessageTokens(message: Message, kind: ProviderKind): number {
  const text =
    message.role === 'assistant'
      ? message.content +
        message.toolCalls.map((call) => call.name + JSON.stringify(call.arguments)).join('')
      : message.content;
  return estimateTextTokens(text, kind) + MESSAGE_OVERHEAD_TOKENS;
}
