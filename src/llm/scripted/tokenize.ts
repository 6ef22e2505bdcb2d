import { CHARACTERS_PER_TOKEN } from '../estimate-tokens.js';

/**
 * Splits text into streamed tokens: each word with the whitespace after it
 * (leading whitespace is a token of its own), so the tokens concatenate to
 * exactly the text.
 */
export function splitIntoTokens(text: string): string[] {
  return text.match(/^\s+|\S+\s*/g) ?? [];
}

/**
 * Cuts text to at most `maxTokens` estimated tokens, at the last word
 * boundary that fits (or mid-word when even the first word is too long).
 */
export function truncateToTokens(
  text: string,
  maxTokens: number,
): { text: string; truncated: boolean } {
  const limit = Math.floor(Math.max(0, Math.floor(maxTokens)) * CHARACTERS_PER_TOKEN);
  if (text.length <= limit) return { text, truncated: false };
  const cut = text.slice(0, limit);
  const boundary = cut.search(/\s\S*$/);
  return { text: boundary > 0 ? cut.slice(0, boundary) : cut, truncated: true };
}
