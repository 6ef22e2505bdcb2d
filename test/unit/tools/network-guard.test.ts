import { describe, expect, it } from 'vitest';
import {
  hostAllowed,
  isHostPattern,
  parseHostPatterns,
} from '../../../src/tools/host-allowlist.js';
import {
  assertPublicAddress,
  BlockedAddressError,
  isPrivateAddress,
  nonPublicRange,
  pinnedLookup,
  resolveCheckedAddresses,
} from '../../../src/tools/network-guard.js';

describe('network guard: address ranges', () => {
  it.each([
    ['10.0.0.1', 'private'],
    ['10.255.255.255', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.254', 'private'],
    ['192.168.1.1', 'private'],
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['100.64.0.1', 'shared (carrier-grade NAT)'],
    ['100.127.255.255', 'shared (carrier-grade NAT)'],
    ['0.0.0.0', '"this network"'],
    ['224.0.0.251', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['192.0.2.10', 'documentation'],
    ['198.18.0.1', 'benchmarking'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456:789a::1', 'unique-local'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['febf::1', 'link-local'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'IPv4-mapped loopback'],
    ['::ffff:7f00:1', 'IPv4-mapped loopback'],
    ['::ffff:10.1.2.3', 'IPv4-mapped private'],
    ['::ffff:169.254.169.254', 'IPv4-mapped link-local'],
    ['64:ff9b::192.168.0.1', 'NAT64 private'],
    ['2002:7f00:1::', '6to4 loopback'],
    ['::127.0.0.1', 'IPv4-compatible'],
    ['2001:db8::1', 'documentation'],
    ['[::1]', 'loopback'],
    ['not-an-address', 'invalid'],
    ['', 'invalid'],
    ['127.1', 'invalid'],
  ])('%s is %s', (address, range) => {
    expect(nonPublicRange(address)).toBe(range);
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '93.184.216.34',
    '9.255.255.255',
    '11.0.0.0',
    '172.15.255.255',
    '172.32.0.1',
    '192.167.255.255',
    '192.169.0.1',
    '100.63.255.255',
    '100.128.0.1',
    '169.253.0.1',
    '126.255.255.255',
    '128.0.0.1',
    '223.255.255.255',
    '2606:4700:4700::1111',
    '2001:4860:4860::8888',
    'fbff::1',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2002:808:808::1',
  ])('%s is public', (address) => {
    expect(nonPublicRange(address)).toBeUndefined();
    expect(isPrivateAddress(address)).toBe(false);
    expect(() => assertPublicAddress(address)).not.toThrow();
  });

  it('assertPublicAddress names the address, its range and the hostname it came from', () => {
    expect(() => assertPublicAddress('10.0.0.5', 'intranet.example')).toThrow(
      new BlockedAddressError('10.0.0.5', 'private', 'intranet.example'),
    );
    expect(() => assertPublicAddress('::1')).toThrow(
      expect.objectContaining({
        code: 'blocked_address',
        userMessage: '::1 is a loopback address, which tools may not reach',
      }),
    );
  });
});

describe('network guard: resolution', () => {
  const table: Record<string, { address: string; family: number }[]> = {
    'public.test': [{ address: '93.184.216.34', family: 4 }],
    'mixed.test': [
      { address: '93.184.216.34', family: 4 },
      { address: 'fd00::1', family: 6 },
    ],
    'empty.test': [],
  };
  const resolved: string[] = [];
  const resolver = async (hostname: string) => {
    resolved.push(hostname);
    return table[hostname] ?? [];
  };

  it('returns the addresses of a hostname whose every address is public', async () => {
    await expect(
      resolveCheckedAddresses('public.test', { allowPrivate: false, resolver }),
    ).resolves.toEqual(table['public.test']);
  });

  it('refuses a hostname when any one of its addresses is private', async () => {
    await expect(
      resolveCheckedAddresses('mixed.test', { allowPrivate: false, resolver }),
    ).rejects.toThrow('mixed.test resolves to fd00::1 is a unique-local address');
    await expect(
      resolveCheckedAddresses('mixed.test', { allowPrivate: true, resolver }),
    ).resolves.toHaveLength(2);
  });

  it('checks IP literals without asking DNS', async () => {
    resolved.length = 0;
    await expect(
      resolveCheckedAddresses('[::1]', { allowPrivate: false, resolver }),
    ).rejects.toBeInstanceOf(BlockedAddressError);
    await expect(
      resolveCheckedAddresses('127.0.0.1', { allowPrivate: true, resolver }),
    ).resolves.toEqual([{ address: '127.0.0.1', family: 4 }]);
    expect(resolved).toEqual([]);
  });

  it('refuses a hostname without addresses', async () => {
    await expect(
      resolveCheckedAddresses('empty.test', { allowPrivate: false, resolver }),
    ).rejects.toThrow('empty.test has no addresses');
  });

  it('the system resolver is checked too: localhost is loopback', async () => {
    await expect(
      resolveCheckedAddresses('localhost', { allowPrivate: false }),
    ).rejects.toBeInstanceOf(BlockedAddressError);
  });

  it('pinnedLookup answers only with the checked addresses, one or all, by family', () => {
    const lookup = pinnedLookup([
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1::1', family: 6 },
    ]);
    const answers: unknown[] = [];
    const record = (error: unknown, address: unknown, family?: number) =>
      answers.push(error ? (error as Error).message : [address, family]);
    lookup('whatever.test', {}, record);
    lookup('whatever.test', { family: 6 }, record);
    lookup('whatever.test', { all: true }, record);
    lookup('whatever.test', { all: true, family: 4 }, record);
    expect(answers).toEqual([
      ['93.184.216.34', 4],
      ['2606:2800:220:1::1', 6],
      [
        [
          { address: '93.184.216.34', family: 4 },
          { address: '2606:2800:220:1::1', family: 6 },
        ],
        undefined,
      ],
      [[{ address: '93.184.216.34', family: 4 }], undefined],
    ]);
    pinnedLookup([{ address: '93.184.216.34', family: 4 }])('v4only.test', { family: 6 }, record);
    expect(answers.at(-1)).toBe('no IPv6 address for v4only.test');
  });
});

describe('host allowlist', () => {
  it('parses a comma-separated list, normalized', () => {
    expect(parseHostPatterns(' Example.COM, *.api.example.com.,, [::1] ,')).toEqual([
      'example.com',
      '*.api.example.com',
      '::1',
    ]);
  });

  it.each([
    ['example.com', true],
    ['*.example.com', true],
    ['127.0.0.1', true],
    ['::1', true],
    ['localhost', true],
    ['under_score.internal', true],
    ['*', false],
    ['*.', false],
    ['ex*ample.com', false],
    ['example..com', false],
    ['-bad.com', false],
    ['http://example.com', false],
    ['example.com:8080', false],
    ['', false],
  ])('%s is a host pattern: %s', (pattern, valid) => {
    expect(isHostPattern(pattern)).toBe(valid);
  });

  it('an exact name matches that host only, a wildcard its subdomains only', () => {
    const patterns = ['docs.example.org', '*.example.com', '127.0.0.1', '::1'];
    expect(hostAllowed('docs.example.org', patterns)).toBe(true);
    expect(hostAllowed('DOCS.example.org.', patterns)).toBe(true);
    expect(hostAllowed('www.docs.example.org', patterns)).toBe(false);
    expect(hostAllowed('api.example.com', patterns)).toBe(true);
    expect(hostAllowed('a.b.example.com', patterns)).toBe(true);
    expect(hostAllowed('example.com', patterns)).toBe(false);
    expect(hostAllowed('badexample.com', patterns)).toBe(false);
    expect(hostAllowed('example.com.evil.net', patterns)).toBe(false);
    expect(hostAllowed('127.0.0.1', patterns)).toBe(true);
    expect(hostAllowed('[::1]', patterns)).toBe(true);
    expect(hostAllowed('localhost', patterns)).toBe(false);
    expect(hostAllowed('anything.test', [])).toBe(false);
  });
});
