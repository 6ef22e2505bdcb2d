/**
 * The header values a tenant stores with an HTTP tool or an MCP server are
 * secrets: stored, sent with each request, never shown again. Yet the
 * server may quote them back: an echo endpoint (httpbin's /anything), an
 * error page showing the request, "invalid token: Bearer …". What it
 * answers goes to the model (and so to its vendor), into the workflow's
 * history, events and the logs, and into a registration's 400; so each
 * text that comes from such a server is passed through `redactSecrets`
 * with its `headerSecrets` before it is used, and before it is cut to an
 * excerpt, which could otherwise keep the head of a secret.
 */

export const REDACTED = '[redacted]';

/**
 * Shorter values are left alone: `v2` or `core` (a version, a team name)
 * would blank out ordinary words of every answer, and are no credentials.
 */
const MIN_SECRET_CHARS = 8;

/** `<scheme> <credentials>`, as in `Bearer abc` or `Basic dXNlcjpwdw==`. */
const SCHEME_AND_CREDENTIALS = /^[A-Za-z][\w.+-]*\s+(\S.*)$/;

/**
 * The texts to redact for `headers`: each value, its credentials without
 * their scheme (a server may quote the token alone), and each of them as
 * it appears inside a JSON string (escaped quotes and backslashes);
 * longest first, so a whole value goes before a part of it.
 */
export function headerSecrets(headers: Readonly<Record<string, string>>): string[] {
  const secrets = new Set<string>();
  for (const value of Object.values(headers)) {
    const whole = value.trim();
    const credentials = SCHEME_AND_CREDENTIALS.exec(whole)?.[1]?.trim();
    for (const secret of credentials ? [whole, credentials] : [whole]) {
      if (secret.length < MIN_SECRET_CHARS) continue;
      secrets.add(secret);
      secrets.add(JSON.stringify(secret).slice(1, -1));
    }
  }
  return [...secrets].sort((a, b) => b.length - a.length);
}

/** `text` with every occurrence of each of `secrets` replaced by `[redacted]`. */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let redacted = text;
  for (const secret of secrets) redacted = redacted.replaceAll(secret, REDACTED);
  return redacted;
}
