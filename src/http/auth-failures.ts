import { isIPv6 } from 'node:net';
import { setNewest } from '../bounded-map.js';

/**
 * Failed authentications per client address, in this replica's memory
 * (AUTH_FAILURE_LIMIT per AUTH_FAILURE_WINDOW_MS). An API key that is not
 * in the replica's cache costs a query; unknown keys are never cached, so
 * without a bound a client sending random or revoked keys made one query
 * per request, as fast as it could send them. Once an address has failed
 * `limit` times in its window, its requests with a key the replica has not
 * found active before are refused (429) without the query until the window
 * ends; known keys still pass, so a valid client behind the same address
 * keeps working.
 *
 * An IPv6 client is counted by its /64, which one host usually holds
 * whole; an IPv4-mapped IPv6 address as the IPv4 address it maps.
 */

export interface AuthFailuresOptions {
  /** Failures an address may have per window; 0 turns the bound off. */
  limit: number;
  windowMs: number;
  /** Addresses remembered; past it the oldest is forgotten (bounded memory). */
  maxAddresses?: number;
  /** Milliseconds clock; tests move it. */
  now?: () => number;
}

/** More addresses than one replica hears from in a window; the bound only caps memory. */
const DEFAULT_MAX_ADDRESSES = 10_000;

interface Window {
  failures: number;
  endsAt: number;
}

export function createAuthFailures(options: AuthFailuresOptions) {
  const maxAddresses = options.maxAddresses ?? DEFAULT_MAX_ADDRESSES;
  const now = options.now ?? Date.now;
  /** By address key, oldest first. */
  const windows = new Map<string, Window>();

  /** The address's window, when one is still open. */
  function openWindow(key: string): Window | undefined {
    const window = windows.get(key);
    if (!window) return undefined;
    if (window.endsAt > now()) return window;
    windows.delete(key);
    return undefined;
  }

  return {
    /** Milliseconds until `ip` may authenticate by query again, when it has spent its failures; else undefined. */
    retryAfterMs(ip: string): number | undefined {
      if (options.limit === 0) return undefined;
      const window = openWindow(addressKey(ip));
      return window && window.failures >= options.limit ? window.endsAt - now() : undefined;
    },

    /** One failed authentication from `ip`; true when it is the one that spends the address's failures. */
    record(ip: string): boolean {
      if (options.limit === 0) return false;
      const key = addressKey(ip);
      const window = openWindow(key) ?? { failures: 0, endsAt: now() + options.windowMs };
      window.failures += 1;
      setNewest(windows, key, window, maxAddresses);
      return window.failures === options.limit;
    },

    /** Addresses held (tests). */
    size: (): number => windows.size,
  };
}

export type AuthFailures = ReturnType<typeof createAuthFailures>;

const MAPPED_IPV4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** What a client address is counted by: IPv4 as it is, IPv6 by its /64 (`2001:db8:0:1::/64`). */
export function addressKey(ip: string): string {
  const address = ip.split('%')[0] as string;
  const mapped = MAPPED_IPV4.exec(address);
  if (mapped) return mapped[1] as string;
  if (!isIPv6(address)) return address;
  return `${expandIPv6(address).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address, lower case without leading zeros. */
function expandIPv6(address: string): string[] {
  const [head = '', tail] = address.toLowerCase().split('::');
  const front = groupsOf(head);
  const back = tail === undefined ? [] : groupsOf(tail);
  const zeros = Array<string>(Math.max(0, 8 - front.length - back.length)).fill('0');
  return [...front, ...zeros, ...back].map((group) => group.replace(/^0+(?=.)/, ''));
}

/** The hex groups of one side of `::`, an embedded IPv4 tail (`64:ff9b::1.2.3.4`) as its two. */
function groupsOf(text: string): string[] {
  if (text === '') return [];
  return text.split(':').flatMap((group) => {
    if (!group.includes('.')) return [group];
    const [a = 0, b = 0, c = 0, d = 0] = group.split('.').map(Number);
    return [((a << 8) | b).toString(16), ((c << 8) | d).toString(16)];
  });
}
