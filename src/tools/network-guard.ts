import type { LookupAddress } from 'node:dns';
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { AppError } from '../errors.js';

/**
 * Keeps tools that reach the network (http_fetch, tenants' HTTP tools) off
 * the service's own network: loopback, private, link-local, unique-local,
 * multicast and other non-public ranges are refused unless the operator
 * allows them (`HTTP_TOOLS_ALLOW_PRIVATE`).
 *
 * Checking a hostname's addresses is not enough on its own: a DNS server
 * can answer a public address to the check and a private one to the
 * connection a moment later (DNS rebinding). So a request resolves once,
 * checks every address, and connects only to those checked addresses
 * through `pinnedLookup`.
 */

/** Thrown when a destination is refused; tools turn it into an error result. */
export class BlockedAddressError extends AppError {
  constructor(
    readonly address: string,
    readonly range: string,
    hostname?: string,
  ) {
    const where = hostname && hostname !== address ? `${hostname} resolves to ${address}` : address;
    super({
      code: 'blocked_address',
      status: 400,
      userMessage: `${where} is a ${range} address, which tools may not reach`,
      blame: 'user',
    });
    this.name = 'BlockedAddressError';
  }
}

interface Range {
  /** Network address as bytes (4 for IPv4, 16 for IPv6). */
  network: Uint8Array;
  prefix: number;
  name: string;
}

function v4Range(cidr: string, name: string): Range {
  const [address = '', prefix = ''] = cidr.split('/');
  const bytes = parseIPv4(address);
  if (!bytes) throw new Error(`bad IPv4 range ${cidr}`);
  return { network: bytes, prefix: Number(prefix), name };
}

function v6Range(cidr: string, name: string): Range {
  const [address = '', prefix = ''] = cidr.split('/');
  const bytes = parseIPv6(address);
  if (!bytes) throw new Error(`bad IPv6 range ${cidr}`);
  return { network: bytes, prefix: Number(prefix), name };
}

// IANA special-purpose registries (RFC 6890 and successors); anything a
// public web server cannot legitimately live on.
const IPV4_RANGES: Range[] = [
  v4Range('0.0.0.0/8', '"this network"'),
  v4Range('10.0.0.0/8', 'private'),
  v4Range('100.64.0.0/10', 'shared (carrier-grade NAT)'),
  v4Range('127.0.0.0/8', 'loopback'),
  v4Range('169.254.0.0/16', 'link-local'),
  v4Range('172.16.0.0/12', 'private'),
  v4Range('192.0.0.0/24', 'IETF protocol assignment'),
  v4Range('192.0.2.0/24', 'documentation'),
  v4Range('192.88.99.0/24', '6to4 relay'),
  v4Range('192.168.0.0/16', 'private'),
  v4Range('198.18.0.0/15', 'benchmarking'),
  v4Range('198.51.100.0/24', 'documentation'),
  v4Range('203.0.113.0/24', 'documentation'),
  v4Range('224.0.0.0/4', 'multicast'),
  v4Range('240.0.0.0/4', 'reserved'),
];

const IPV6_RANGES: Range[] = [
  v6Range('::/128', 'unspecified'),
  v6Range('::1/128', 'loopback'),
  // Deprecated IPv4-compatible addresses; some stacks still route them to the embedded IPv4.
  v6Range('::/96', 'IPv4-compatible'),
  v6Range('64:ff9b:1::/48', 'local NAT64'),
  v6Range('100::/64', 'discard'),
  v6Range('2001:db8::/32', 'documentation'),
  v6Range('fc00::/7', 'unique-local'),
  v6Range('fe80::/10', 'link-local'),
  v6Range('fec0::/10', 'site-local'),
  v6Range('ff00::/8', 'multicast'),
];

/** IPv6 prefixes that carry an IPv4 address, judged by that address: [range, byte offset of the IPv4]. */
const IPV6_EMBEDDING_IPV4: [Range, number][] = [
  [v6Range('::ffff:0:0/96', 'IPv4-mapped'), 12],
  [v6Range('64:ff9b::/96', 'NAT64'), 12],
  [v6Range('2002::/16', '6to4'), 2],
];

/**
 * The name of the non-public range an IP address is in (`loopback`,
 * `private`, ...), or undefined for a public address. Something that is not
 * an IP address counts as non-public: a guard fails closed.
 */
export function nonPublicRange(address: string): string | undefined {
  const v4 = parseIPv4(address);
  if (v4) return IPV4_RANGES.find((range) => inRange(v4, range))?.name;
  const v6 = parseIPv6(address);
  if (!v6) return 'invalid';
  for (const [range, offset] of IPV6_EMBEDDING_IPV4) {
    if (!inRange(v6, range)) continue;
    const embedded = IPV4_RANGES.find((candidate) =>
      inRange(v6.subarray(offset, offset + 4), candidate),
    );
    return embedded ? `${range.name} ${embedded.name}` : undefined;
  }
  return IPV6_RANGES.find((range) => inRange(v6, range))?.name;
}

/** Whether an IP address is loopback, private, link-local, unique-local, multicast or otherwise not public. */
export function isPrivateAddress(address: string): boolean {
  return nonPublicRange(address) !== undefined;
}

/** Throws `BlockedAddressError` for a non-public address. */
export function assertPublicAddress(address: string, hostname?: string): void {
  const range = nonPublicRange(address);
  if (range !== undefined) throw new BlockedAddressError(address, range, hostname);
}

/** Resolves a hostname to every address it has (the resolver of `resolveCheckedAddresses`). */
export type Resolver = (hostname: string) => Promise<LookupAddress[]>;

export const systemResolver: Resolver = (hostname) =>
  dnsLookup(hostname, { all: true, verbatim: true });

export interface ResolveOptions {
  /** `HTTP_TOOLS_ALLOW_PRIVATE`: skip the range check (for local development and tests). */
  allowPrivate: boolean;
  resolver?: Resolver;
}

/**
 * Every address of a hostname (or the IP literal itself), each checked.
 * One non-public address refuses the whole hostname: the connection could
 * land on any of them.
 */
export async function resolveCheckedAddresses(
  hostname: string,
  options: ResolveOptions,
): Promise<LookupAddress[]> {
  const bare = stripBrackets(hostname);
  const family = isIP(bare);
  const addresses =
    family !== 0 ? [{ address: bare, family }] : await (options.resolver ?? systemResolver)(bare);
  if (addresses.length === 0) throw new Error(`${bare} has no addresses`);
  if (!options.allowPrivate) {
    for (const { address } of addresses) assertPublicAddress(address, bare);
  }
  return addresses;
}

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for `http.request`/`net.connect` that answers only with
 * addresses checked beforehand, so the connection cannot go anywhere the
 * check did not see. Node asks for all addresses when it races IPv4 and
 * IPv6 (autoSelectFamily), else for one.
 */
export function pinnedLookup(addresses: LookupAddress[]) {
  return (
    hostname: string,
    options: { family?: number | string; all?: boolean },
    callback: LookupCallback,
  ): void => {
    const wanted = Number(String(options.family ?? 0).replace('IPv', ''));
    const matching = addresses.filter((entry) => wanted === 0 || entry.family === wanted);
    const first = matching[0];
    if (!first) {
      const error: NodeJS.ErrnoException = new Error(`no IPv${wanted} address for ${hostname}`);
      error.code = 'ENOTFOUND';
      callback(error, '');
      return;
    }
    if (options.all) callback(null, matching);
    else callback(null, first.address, first.family);
  };
}

/** `[::1]` as URL.hostname spells it -> `::1`. */
export function stripBrackets(hostname: string): string {
  return hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
}

function inRange(bytes: Uint8Array, range: Range): boolean {
  if (bytes.length !== range.network.length) return false;
  const whole = Math.floor(range.prefix / 8);
  for (let i = 0; i < whole; i++) if (bytes[i] !== range.network[i]) return false;
  const rest = range.prefix % 8;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return ((bytes[whole] ?? 0) & mask) === ((range.network[whole] ?? 0) & mask);
}

/** Dotted-quad IPv4 (four decimal parts, as `net.isIPv4` accepts) to 4 bytes. */
function parseIPv4(text: string): Uint8Array | undefined {
  if (isIP(text) !== 4) return undefined;
  return Uint8Array.from(text.split('.').map(Number));
}

/** IPv6 (with `::`, an embedded dotted quad, or a `%zone`) to 16 bytes. */
function parseIPv6(text: string): Uint8Array | undefined {
  const address = stripBrackets(text).split('%')[0] ?? '';
  if (isIP(address) !== 6) return undefined;
  const [head = '', tail] = address.split('::');
  const groups = (part: string): number[] => {
    if (part === '') return [];
    return part.split(':').flatMap((group) => {
      if (group.includes('.')) {
        const [a = 0, b = 0, c = 0, d = 0] = group.split('.').map(Number);
        return [(a << 8) | b, (c << 8) | d];
      }
      return [Number.parseInt(group, 16)];
    });
  };
  const before = groups(head);
  const after = tail === undefined ? [] : groups(tail);
  const zeros = new Array<number>(8 - before.length - after.length).fill(0);
  const bytes = new Uint8Array(16);
  [...before, ...zeros, ...after].forEach((group, index) => {
    bytes[index * 2] = group >> 8;
    bytes[index * 2 + 1] = group & 0xff;
  });
  return bytes;
}
