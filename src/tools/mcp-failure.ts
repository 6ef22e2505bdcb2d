import { storableText } from '../json-limits.js';
import { redactSecrets } from '../redaction.js';
import { BlockedAddressError } from './network-guard.js';

/**
 * Of a failure's message, what a reason quotes: the server's own words (an
 * HTTP error's body, say) go into a warning of every run and the
 * registration's 400, so they are cut as an HTTP tool's error answer is,
 * and made storable (a NUL failed the run's write).
 */
const FAILURE_EXCERPT_CHARS = 300;

export function describeFailure(
  error: unknown,
  server: { url: URL; secrets: readonly string[] },
): string {
  const { url } = server;
  if (error instanceof BlockedAddressError) return `refused: ${error.userMessage}`;
  if (isTimeout(error)) return `${url.host} did not answer in time`;
  const cause = (error as { cause?: NodeJS.ErrnoException }).cause;
  const code = (error as NodeJS.ErrnoException).code ?? cause?.code;
  if (typeof code === 'string') return `could not reach ${url.host}: ${code}`;
  // Redacted before the excerpt is cut, which could keep a secret's head.
  const message = redactSecrets(String((error as Error).message), server.secrets)
    .replace(/\s+/g, ' ')
    .trim();
  const excerpt = [...message].slice(0, FAILURE_EXCERPT_CHARS).join('');
  return storableText(`${url.host}: ${excerpt}${excerpt.length < message.length ? '…' : ''}`);
}

/** `error`'s message, the server's header values (`secrets`) redacted: for a log line, whose scrub knows no tenant's secrets. */
export function redactedMessage(error: unknown, secrets: readonly string[]): string {
  return redactSecrets(error instanceof Error ? error.message : String(error), secrets);
}

/** The SDK's `RequestTimeout` McpError (JSON-RPC code -32001). */
export function isTimeout(error: unknown): boolean {
  return (error as { code?: unknown }).code === -32001;
}
