/**
 * How a secret value is kept out of text that quotes it: the tools' answers
 * and MCP servers' tool lists (tools/header-secrets.ts) and every log line
 * (log-secrets.ts) have it replaced by `[redacted]`, as pino's redaction by
 * key path does.
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

/**
 * `value`, a JSON value, with `redactSecrets` applied to each string in it,
 * object keys included: what a server lists (a tool's description, a
 * default in its input schema) may quote a secret anywhere. A new value;
 * `value` is left as it was.
 */
export function redactSecretsIn<T>(value: T, secrets: readonly string[]): T {
  // The walk returns the shape it was given: only strings are replaced.
  return secrets.length === 0 ? value : (redactJson(value, secrets) as T);
}

function redactJson(value: unknown, secrets: readonly string[]): unknown {
  if (typeof value === 'string') return redactSecrets(value, secrets);
  if (Array.isArray(value)) return value.map((item) => redactJson(item, secrets));
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [
      redactSecrets(key, secrets),
      redactJson(item, secrets),
    ]),
  );
}
