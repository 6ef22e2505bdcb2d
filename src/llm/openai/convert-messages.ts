import type {
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from 'openai/resources/chat/completions';
import { toolParametersJsonSchema } from '../tool-arguments.js';
import type { Message, ModelRequest, SystemPrompt, ToolDefinition } from '../types.js';

/** Chat Completions params of one turn; `stream` and `stream_options` are added by the caller. */
export type ChatParams = Omit<ChatCompletionCreateParamsStreaming, 'stream' | 'stream_options'>;

export interface ConvertTarget {
  modelId: string;
  /** The model's configured maximum output; caps the request's own. */
  maxOutputTokens: number;
}

/** Converts our `ModelRequest` into Chat Completions params. */
export function convertRequest(request: ModelRequest, target: ConvertTarget): ChatParams {
  const messages = [...convertSystem(request.system), ...request.messages.map(convertMessage)];
  const params: ChatParams = {
    model: target.modelId,
    messages,
    max_completion_tokens: Math.min(
      request.maxOutputTokens ?? target.maxOutputTokens,
      target.maxOutputTokens,
    ),
  };
  if (request.temperature !== undefined) params.temperature = request.temperature;
  // OpenAI rejects an empty `tools` array and a `tool_choice` without tools.
  if (request.tools && request.tools.length > 0) {
    params.tools = request.tools.map(convertTool);
    params.tool_choice = request.toolChoice ?? 'auto';
  }
  return params;
}

/**
 * One system message, stable part first: OpenAI caches prompt prefixes
 * automatically, so the byte-identical stable part is what hits the cache.
 */
export function convertSystem(system: SystemPrompt | undefined): ChatCompletionMessageParam[] {
  if (!system) return [];
  const content = [system.stable, system.volatile]
    .filter((part): part is string => Boolean(part))
    .join('\n\n');
  return content === '' ? [] : [{ role: 'system', content }];
}

export function convertMessage(message: Message): ChatCompletionMessageParam {
  switch (message.role) {
    case 'user':
      return { role: 'user', content: message.content };
    case 'assistant':
      if (message.toolCalls.length === 0) return { role: 'assistant', content: message.content };
      return {
        role: 'assistant',
        // `content` may be null when the assistant only called tools.
        content: message.content === '' ? null : message.content,
        tool_calls: message.toolCalls.map((call) => ({
          id: call.id,
          type: 'function',
          function: { name: call.name, arguments: JSON.stringify(call.arguments ?? {}) },
        })),
      };
    case 'tool':
      return {
        role: 'tool',
        tool_call_id: message.toolCallId,
        // Chat Completions has no error flag on tool results: say it in the content.
        content: message.isError ? `Error: ${message.content}` : message.content,
      };
  }
}

export function convertTool(tool: ToolDefinition): ChatCompletionTool {
  return {
    type: 'function',
    function: {
      name: tool.name,
      description: tool.description,
      parameters: toolParametersJsonSchema(tool),
    },
  };
}
