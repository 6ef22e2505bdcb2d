import type { Message, ToolResultMessage } from '../types.js';

/** Content of the latest user message, or '' when there is none. */
export function latestUserText(messages: Message[]): string {
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index];
    if (message?.role === 'user') return message.content;
  }
  return '';
}

/** The tool results after the last assistant message: what the model has to answer now. */
export function trailingToolResults(messages: Message[]): ToolResultMessage[] {
  const results: ToolResultMessage[] = [];
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index];
    if (message?.role !== 'tool') break;
    results.unshift(message);
  }
  return results;
}

/** Tool calls made earlier in the conversation, so new call ids never repeat one. */
export function countToolCalls(messages: Message[]): number {
  return messages.reduce(
    (sum, message) => sum + (message.role === 'assistant' ? message.toolCalls.length : 0),
    0,
  );
}

/** Words of a text: runs of non-space characters holding a letter or a digit. */
export function wordsOf(text: string): string[] {
  return text.split(/\s+/).filter((word) => /[\p{L}\p{N}]/u.test(word));
}

/** Collapses whitespace and cuts to `maxChars`, marking the cut with an ellipsis. */
export function clip(text: string, maxChars: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= maxChars ? flat : `${flat.slice(0, maxChars - 1).trimEnd()}…`;
}
