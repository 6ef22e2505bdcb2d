import type {
  FakeErrorType,
  FakeFinishReason,
  FakeReply,
  FakeStreamErrorType,
  FakeToolCall,
  FakeUsage,
} from './provider-types.js';

/** What a reply reports when the script gives no usage. */
export const DEFAULT_USAGE: Readonly<FakeUsage> = Object.freeze({ input: 10, output: 5 });

/** One SSE frame as written to the socket. */
export interface Frame {
  text: string;
  /** A text or tool-argument delta: the unit `chunkDelayMs` and `betweenChunks` apply to. */
  content: boolean;
}

export interface ReplyContext {
  /** The request's `model`, echoed back as the vendors do. */
  model: string;
  /** Sequence number of the request on this server; keeps generated ids unique. */
  seq: number;
  /** OpenAI only: the request set `stream_options.include_usage`. */
  includeUsage: boolean;
}

/** How one vendor API puts the fake's scripted answers on the wire. */
export interface VendorWire {
  /** The response header that carries the request id, as the vendor names it. */
  requestIdHeader: string;
  replyBody(reply: FakeReply, context: ReplyContext): unknown;
  replyFrames(reply: FakeReply, context: ReplyContext): Frame[];
  /**
   * The opening frames and the text deltas of `chunks`, with nothing
   * closing them; the opening reports `usage` where the vendor's does.
   */
  partialFrames(chunks: string[], context: ReplyContext, usage?: FakeUsage): Frame[];
  /** An error frame inside an HTTP 200 stream. */
  streamErrorFrame(type: FakeStreamErrorType): string;
  /** The HTTP status for a `stream-error` when the request did not ask to stream. */
  streamErrorStatus(type: FakeStreamErrorType): number;
  /** The vendor's error body; `message` replaces the default wording. */
  errorBody(type: FakeErrorType, message?: string): unknown;
  /** Why the vendor's API would refuse the request with a 400 before answering, or undefined. */
  refusal(body: unknown): string | undefined;
}

export function sseData(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

export function sseEvent(event: string, payload: unknown): string {
  return `event: ${event}\n${sseData(payload)}`;
}

export function structureFrame(text: string): Frame {
  return { text, content: false };
}

export function contentFrame(text: string): Frame {
  return { text, content: true };
}

/** The text deltas of a reply: its `chunks`, else its `text` cut after each run of whitespace. */
export function replyChunks(reply: Pick<FakeReply, 'text' | 'chunks'>): string[] {
  if (reply.chunks) return reply.chunks;
  return (reply.text ?? '').split(/(?<=\s)(?=\S)/).filter((word) => word.length > 0);
}

export function argumentsText(call: FakeToolCall): string {
  return typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments);
}

/**
 * Splits tool-call arguments into up to three deltas at code-point
 * boundaries, so clients must really concatenate before parsing (the vendors
 * split mid-token too).
 */
export function argumentPieces(text: string): string[] {
  const codePoints = Array.from(text);
  const size = Math.max(1, Math.ceil(codePoints.length / 3));
  const pieces: string[] = [];
  for (let start = 0; start < codePoints.length; start += size) {
    pieces.push(codePoints.slice(start, start + size).join(''));
  }
  return pieces;
}

export function finishReason(reply: FakeReply): FakeFinishReason {
  return reply.finish ?? (reply.toolCalls?.length ? 'tool_calls' : 'stop');
}

export function usageOf(reply: FakeReply): FakeUsage {
  return reply.usage ?? DEFAULT_USAGE;
}

/** The error type a status stands for, when the script names none. */
export function errorTypeForStatus(status: number): FakeErrorType {
  if (status === 401 || status === 403) return 'authentication';
  if (status === 429) return 'rate_limit';
  if (status === 503 || status === 529) return 'overloaded';
  if (status >= 500) return 'server';
  return 'invalid_request';
}
