import { createHash, randomBytes } from 'node:crypto';

/**
 * API keys are 32 random bytes, base64url-encoded behind a `wmk_` prefix
 * that makes them easy to spot by secret scanners. Only a SHA-256 hash is
 * stored: with 256 bits of entropy a fast hash is as safe as a slow one,
 * and it keeps every authenticated request to one indexed lookup.
 */
const KEY_PREFIX = 'wmk_';
const KEY_BYTES = 32;
/** Characters kept in clear for listings (`wmk_` plus 8 of the random part). */
const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 8;

export interface GeneratedKey {
  /** The secret, shown to its owner once. */
  secret: string;
  prefix: string;
  hash: Buffer;
}

export function generateApiKey(): GeneratedKey {
  const secret = KEY_PREFIX + randomBytes(KEY_BYTES).toString('base64url');
  return { secret, prefix: secret.slice(0, DISPLAY_PREFIX_LENGTH), hash: hashApiKey(secret) };
}

export function hashApiKey(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/** Cheap shape check before any database lookup. */
export function looksLikeApiKey(secret: string): boolean {
  return /^wmk_[A-Za-z0-9_-]{43}$/.test(secret);
}

/**
 * `text` (a log line, a URL a client put a key in) with each API key in it
 * replaced by `replacement`: found by its shape, so keys issued after the
 * text's writer was made are found too. A longer run of key characters is
 * not a key, and a listing's prefix (`wmk_` and 8) is too short to be one.
 */
export function replaceApiKeys(text: string, replacement: string): string {
  if (!text.includes(KEY_PREFIX)) return text;
  return text.replace(/(?<![\w-])wmk_[\w-]{43}(?![\w-])/g, replacement);
}
