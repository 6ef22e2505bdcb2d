import { isIP } from 'node:net';
import { stripBrackets } from './network-guard.js';

/**
 * Host allowlists of network tools (`HTTP_TOOLS_ALLOWED_HOSTS`,
 * `HTTP_FETCH_ALLOWED_HOSTS`): `example.com` allows that host only,
 * `*.example.com` any of its subdomains (not `example.com` itself, so an
 * operator lists both when both are meant). IP literals are written as
 * such (`127.0.0.1`, `::1`). Matching ignores case and a trailing dot.
 */

const LABEL = '[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?';
const HOST_PATTERN = new RegExp(`^(\\*\\.)?${LABEL}(\\.${LABEL})*$`);

/** Whether a pattern is a hostname, a `*.domain` wildcard or an IP literal. */
export function isHostPattern(pattern: string): boolean {
  const normalized = normalizeHost(pattern);
  if (normalized === '') return false;
  if (isIP(normalized) !== 0) return true;
  return normalized.length <= 253 && HOST_PATTERN.test(normalized);
}

/** A comma-separated list to normalized patterns (lower case, no brackets, no trailing dot). */
export function parseHostPatterns(list: string): string[] {
  return list
    .split(',')
    .map(normalizeHost)
    .filter((pattern) => pattern !== '');
}

/** Whether a hostname (as `URL.hostname` gives it) matches one of the patterns. */
export function hostAllowed(hostname: string, patterns: readonly string[]): boolean {
  const host = normalizeHost(hostname);
  return patterns.some((raw) => {
    const pattern = normalizeHost(raw);
    if (!pattern.startsWith('*.')) return host === pattern;
    // Keep the dot: `*.example.com` must not match `badexample.com`, nor `example.com`.
    const suffix = pattern.slice(1);
    return host.endsWith(suffix) && host.length > suffix.length;
  });
}

function normalizeHost(host: string): string {
  const bare = stripBrackets(host.trim().toLowerCase());
  return bare.endsWith('.') ? bare.slice(0, -1) : bare;
}
