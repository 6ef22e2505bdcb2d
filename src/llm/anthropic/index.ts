import type { LanguageModel } from '../types.js';
import { type AnthropicModelOptions, streamTurn } from './stream-turn.js';

export { type AnthropicClientOptions, createAnthropicClient } from './create-client.js';
export type { AnthropicModelOptions } from './stream-turn.js';

/** A model of the Anthropic Messages API behind our `LanguageModel` port. */
export function anthropicModel(options: AnthropicModelOptions): LanguageModel {
  return {
    provider: options.provider,
    modelId: options.modelId,
    stream: (request, streamOptions) => streamTurn(options, request, streamOptions),
  };
}
