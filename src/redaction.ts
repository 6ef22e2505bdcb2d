/**
 * How a secret value is kept out of text that quotes it: the tools' answers
 * (tools/header-secrets.ts) and every log line (log-secrets.ts) have it
 * replaced by `[redacted]`, as pino's redaction by key path does.
 */

export const REDACTED = '[redacted]';

/**
 * Shortest value replaced. A shorter one (`v2`, `core`, a database
 * password `x`) is as likely to be a piece of ordinary words, and
 * replacing it would mangle text without hiding anything worth hiding.
 */
export const MIN_SECRET_CHARS = 8;

/**
 * `text` with every occurrence of each of `secrets` replaced by
 * `[redacted]`, in their order (longest first, so that a secret holding
 * another is replaced whole).
 */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let redacted = text;
  for (const secret of secrets) {
    if (redacted.includes(secret)) redacted = redacted.replaceAll(secret, REDACTED);
  }
  return redacted;
}
