import { MIN_SECRET_CHARS } from '../redaction.js';

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

/** `<scheme> <credentials>`, as in `Bearer abc` or `Basic dXNlcjpwdw==`. */
const SCHEME_AND_CREDENTIALS = /^([A-Za-z][\w.+-]*)\s+(\S.*)$/;

/** Base64 as Basic credentials are written: a server may answer them decoded. */
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * The texts to redact for `headers`: each value and its credentials
 * without their scheme (a server may quote the token alone); for Basic,
 * the `user:password` they encode and the password alone; and each of
 * these as it appears inside a JSON string (escaped quotes and
 * backslashes) and URL-encoded (an echo of a query string or a form).
 * Longest first, so a whole value goes before a part of it.
 */
export function headerSecrets(headers: Readonly<Record<string, string>>): string[] {
  const secrets = new Set<string>();
  for (const value of Object.values(headers)) {
    const whole = value.trim();
    for (const secret of [whole, ...credentialsOf(whole)]) {
      if (secret.length < MIN_SECRET_CHARS) continue;
      secrets.add(secret);
      secrets.add(JSON.stringify(secret).slice(1, -1));
      secrets.add(encodeURIComponent(secret));
      // A form's encoding writes a space as `+`.
      secrets.add(encodeURIComponent(secret).replaceAll('%20', '+'));
    }
  }
  return [...secrets].sort((a, b) => b.length - a.length);
}

/** The credentials in `value` without its scheme, and for Basic what they decode to. */
function credentialsOf(value: string): string[] {
  const [, scheme, credentials] = SCHEME_AND_CREDENTIALS.exec(value) ?? [];
  if (scheme === undefined || credentials === undefined) return [];
  const token = credentials.trim();
  if (scheme.toLowerCase() !== 'basic' || !BASE64.test(token)) return [token];
  const decoded = Buffer.from(token, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  // Not `user:password` in UTF-8 (a token that only looks like base64): the token alone.
  if (colon < 0 || decoded.includes('\uFFFD')) return [token];
  return [token, decoded, decoded.slice(colon + 1)];
}
