import type Anthropic from '@anthropic-ai/sdk';
import { toolParametersJsonSchema } from '../tool-arguments.js';
import type { Message, ModelRequest, SystemPrompt, ToolCall, ToolDefinition } from '../types.js';
import { createToolUseIds } from './assign-tool-use-ids.js';

/** The Messages parameters of one turn; the caller adds `stream: true`. */
export type MessageParams = Omit<Anthropic.MessageCreateParamsStreaming, 'stream'>;

export interface ModelLimits {
  modelId: string;
  /** The model's configured maximum output; caps the request's own. */
  maxOutputTokens: number;
}

/**
 * Our `ModelRequest` as Messages parameters. `temperature` is not sent:
 * this SDK's Messages parameters no longer have it.
 */
export function toMessageParams(request: ModelRequest, model: ModelLimits): MessageParams {
  const params: MessageParams = {
    model: model.modelId,
    // Required by Anthropic; never more than the model allows.
    max_tokens: Math.max(
      1,
      Math.min(request.maxOutputTokens ?? model.maxOutputTokens, model.maxOutputTokens),
    ),
    messages: toMessageList(request.messages),
  };
  const system = toSystemBlocks(request.system);
  if (system.length > 0) params.system = system;
  if (request.tools && request.tools.length > 0) {
    params.tools = request.tools.map(toTool);
    params.tool_choice = toToolChoice(request.toolChoice ?? 'auto');
  }
  return params;
}

/**
 * The stable part carries the cache breakpoint, so every turn of a workflow
 * reads it (and the tools before it) from the prompt cache; the volatile part
 * comes after the breakpoint and may change freely. Blank parts are left out
 * (see `hasText`).
 */
export function toSystemBlocks(system: SystemPrompt | undefined): Anthropic.TextBlockParam[] {
  const blocks: Anthropic.TextBlockParam[] = [];
  if (system && hasText(system.stable))
    blocks.push({ type: 'text', text: system.stable, cache_control: { type: 'ephemeral' } });
  if (system?.volatile !== undefined && hasText(system.volatile))
    blocks.push({ type: 'text', text: system.volatile });
  return blocks;
}

/**
 * Anthropic refuses a text block, a tool result's content included, that is
 * empty or only whitespace: 400 "text content blocks must contain
 * non-whitespace text". Models do write turns of a bare "\n\n" before their
 * tool call, and they come back in the history of the next turn.
 */
function hasText(text: string): boolean {
  return /\S/.test(text);
}

function toTool(tool: ToolDefinition): Anthropic.Tool {
  return {
    name: tool.name,
    description: tool.description,
    // zod object schemas come out as `{ type: 'object', ... }`, which is what Anthropic takes.
    input_schema: toolParametersJsonSchema(tool) as Anthropic.Tool.InputSchema,
  };
}

function toToolChoice(choice: NonNullable<ModelRequest['toolChoice']>): Anthropic.ToolChoice {
  if (choice === 'none') return { type: 'none' };
  if (choice === 'required') return { type: 'any' };
  return { type: 'auto' };
}

/**
 * Anthropic wants alternating roles and a tool's result in the user message
 * right after the assistant's `tool_use`, before anything else in it. Our
 * `tool` messages become `tool_result` blocks of a user message; blocks of
 * consecutive messages with the same role are merged into one message, so
 * several tool results share one user message and a user text that follows
 * them comes after them.
 */
export function toMessageList(messages: Message[]): Anthropic.MessageParam[] {
  const list: { role: 'user' | 'assistant'; content: Anthropic.ContentBlockParam[] }[] = [];
  const ids = createToolUseIds();
  const append = (role: 'user' | 'assistant', blocks: Anthropic.ContentBlockParam[]) => {
    if (blocks.length === 0) return;
    const last = list.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else list.push({ role, content: blocks });
  };
  for (const message of messages) {
    if (message.role === 'user') append('user', textBlocks(message.content));
    else if (message.role === 'assistant')
      append('assistant', [
        ...textBlocks(message.content),
        ...ids.forCalls(message.toolCalls).map(toToolUseBlock),
      ]);
    else append('user', [toToolResultBlock(message, ids.forResult(message.toolCallId))]);
  }
  return list;
}

function textBlocks(text: string): Anthropic.TextBlockParam[] {
  return hasText(text) ? [{ type: 'text', text }] : [];
}

function toToolUseBlock(call: ToolCall): Anthropic.ToolUseBlockParam {
  return { type: 'tool_use', id: call.id, name: call.name, input: toInputObject(call.arguments) };
}

/**
 * Anthropic only takes an object as `input`. A call whose arguments were no
 * object (an invalid call) is sent with `{}`: its error result already tells
 * the model what was wrong.
 */
function toInputObject(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function toToolResultBlock(
  message: Extract<Message, { role: 'tool' }>,
  toolUseId: string,
): Anthropic.ToolResultBlockParam {
  return {
    type: 'tool_result',
    // The id of its call as this request sends it (assign-tool-use-ids.ts).
    tool_use_id: toolUseId,
    // Sent as a text block: a blank one is refused, a result without content is not.
    ...(hasText(message.content) ? { content: message.content } : {}),
    is_error: message.isError === true,
  };
}
