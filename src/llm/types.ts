import type { z } from 'zod';
import type { LlmError } from './errors.js';

/**
 * The provider-neutral model port. The orchestrator imports only this
 * folder's `types.ts`, `errors.ts` and the router; vendor adapters convert
 * to and from these shapes in their own folders.
 *
 * Terminology:
 * - model: a named entry of the model catalogue (provider + vendor model id + limits + prices).
 * - provider: a configured vendor endpoint (`openai`, `anthropic`, `scripted`, or an
 *   OpenAI-compatible server under its own name).
 * - turn: one model call: a request in, a stream of parts out.
 * - attempt: one try of a turn against one model; a turn may take several (retries, fallbacks).
 * - tool call: the model asking for a tool to run, with JSON arguments.
 */

export interface UserMessage {
  role: 'user';
  content: string;
}

export interface AssistantMessage {
  role: 'assistant';
  content: string;
  toolCalls: ToolCall[];
}

/** The result of one tool call, sent back to the model in the next turn. */
export interface ToolResultMessage {
  role: 'tool';
  toolCallId: string;
  toolName: string;
  content: string;
  isError?: boolean;
}

export type Message = UserMessage | AssistantMessage | ToolResultMessage;

export interface ToolCall {
  id: string;
  name: string;
  /** Parsed JSON arguments, validated against the tool's parameters schema. */
  arguments: unknown;
}

export interface ToolDefinition {
  name: string;
  description: string;
  /** zod schema of the arguments; turned into JSON Schema for the provider. */
  parameters: z.ZodType;
}

/**
 * The system prompt in two parts: `stable` stays byte-identical across the
 * turns of a workflow (so providers' prompt caches hit); `volatile` holds
 * what changes (time, budget left, ...).
 */
export interface SystemPrompt {
  stable: string;
  volatile?: string;
}

export interface ModelRequest {
  system?: SystemPrompt;
  messages: Message[];
  tools?: ToolDefinition[];
  /** `auto` by default when tools are given. */
  toolChoice?: 'auto' | 'none' | 'required';
  /** Capped by the model's configured maximum output, and by the router to the room its input leaves in the window. */
  maxOutputTokens?: number;
  temperature?: number;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'other';

export interface Usage {
  /** Every input token, cached ones included. */
  inputTokens: number;
  outputTokens: number;
  /** Input tokens read from the provider's prompt cache. */
  cachedInputTokens: number;
  /** Input tokens written to the provider's prompt cache (Anthropic). */
  cacheWriteTokens: number;
}

export type StreamPart =
  | { type: 'text-delta'; text: string }
  /**
   * `argumentChars`: the arguments' characters as the model sent them (the
   * adapter assembled and counted them, output-bound.ts), which the router
   * counts against the output bound as it counts an invalid call's.
   */
  | { type: 'tool-call'; toolCall: ToolCall; argumentChars: number }
  /** The model called a tool with arguments that are not JSON or fail the schema; the loop answers it with an error result. */
  | { type: 'tool-call-invalid'; id: string; name: string; rawArguments: string; reason: string }
  /** An attempt's usage: from the router, a turn has one per attempt that reported any (RouterStream). */
  | { type: 'usage'; usage: Usage }
  | { type: 'finish'; reason: FinishReason; providerReason: string | null }
  /** Only from the router, as the last part, when a turn fails for good. */
  | { type: 'error'; error: LlmError };

export interface StreamOptions {
  /**
   * Aborts the HTTP request (cancel, timeouts). The adapters hand it to
   * the SDK, which adds a listener it never removes: give every call a
   * signal of its own (the router gives each attempt one).
   */
  signal: AbortSignal;
  /**
   * Called once, when the provider starts its answer (its first content
   * of any kind), before any part of it is yielded. The router's
   * first-part timeout ends there rather than at the first part: a tool
   * call is a part only once its arguments are complete, and a long one
   * (a document written as an argument) streams for longer than that
   * timeout allows. An adapter that yields its first part as soon as
   * the answer starts may leave it out.
   */
  onAnswerStart?: () => void;
  /**
   * Called with the call's usage so far whenever the provider reports it
   * during the stream: Anthropic reports the input side as its stream
   * opens (`message_start`), before a failure may end it. What a call
   * that fails later still used, which the router records and reports;
   * the `usage` part at the end says the same as the last report.
   */
  onUsage?: (usage: Usage) => void;
}

/**
 * One vendor model behind an adapter. `stream` throws `LlmError` on failure
 * (before or during the stream); it never yields an `error` part itself.
 */
export interface LanguageModel {
  /** Name of the configured provider, e.g. `openai`, `anthropic`, `scripted`, `ollama`. */
  readonly provider: string;
  /** The vendor's model id, e.g. `gpt-4o-mini`. */
  readonly modelId: string;
  stream(request: ModelRequest, options: StreamOptions): AsyncIterable<StreamPart>;
}

/** The largest token count a call's ledger row holds (a PostgreSQL integer). */
const MAX_TOKEN_COUNT = 2_147_483_647;

/**
 * A token count as a provider reported it, as Waymark counts it: a whole
 * number from 0 to MAX_TOKEN_COUNT. Providers and compatible servers have
 * sent fractions, negatives, nulls and numeric strings; stored as sent,
 * they failed the workflow's totals or the ledger's row, and a negative one
 * would lower what a budget counts. What is not a number counts 0.
 */
export function tokenCount(reported: unknown): number {
  const count =
    typeof reported === 'number'
      ? reported
      : typeof reported === 'string' && reported.trim() !== ''
        ? Number(reported)
        : Number.NaN;
  if (!Number.isFinite(count) || count <= 0) return 0;
  return Math.min(Math.round(count), MAX_TOKEN_COUNT);
}

export const emptyUsage = (): Usage => ({
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
});
