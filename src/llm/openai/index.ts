import type { LanguageModel } from '../types.js';
import { type OpenAiModelOptions, streamTurn } from './stream-turn.js';

export { createOpenAiClient, type OpenAiClientOptions } from './create-client.js';
export type { OpenAiModelOptions } from './stream-turn.js';

/** A `LanguageModel` on OpenAI Chat Completions or any OpenAI-compatible server. */
export function openAiModel(options: OpenAiModelOptions): LanguageModel {
  return {
    provider: options.provider,
    modelId: options.modelId,
    stream: (request, streamOptions) => streamTurn(options, request, streamOptions),
  };
}
