import { describe, expect, it } from 'vitest';
import { addressKey, createAuthFailures } from '../../src/http/auth-failures.js';

/** The count of failed authentications per client address (src/http/auth-failures.ts), on a clock the tests move. */

function failures(limit: number, options: { maxAddresses?: number } = {}) {
  let now = 1_000;
  const counted = createAuthFailures({ limit, windowMs: 60_000, now: () => now, ...options });
  return { counted, advance: (ms: number) => (now += ms) };
}

describe('createAuthFailures', () => {
  it('an address is held once it has failed `limit` times in its window, for what is left of the window', () => {
    const { counted, advance } = failures(3);
    expect(counted.record('192.0.2.1')).toBe(false);
    advance(10_000);
    expect(counted.record('192.0.2.1')).toBe(false);
    expect(counted.retryAfterMs('192.0.2.1')).toBeUndefined();
    // The third spends them: true once, to log it once.
    expect(counted.record('192.0.2.1')).toBe(true);
    expect(counted.retryAfterMs('192.0.2.1')).toBe(50_000);
    expect(counted.record('192.0.2.1')).toBe(false);
    expect(counted.retryAfterMs('192.0.2.2')).toBeUndefined();
    // The window counts from the first failure; at its end the address starts afresh.
    advance(50_000);
    expect(counted.retryAfterMs('192.0.2.1')).toBeUndefined();
    expect(counted.record('192.0.2.1')).toBe(false);
  });

  it('a limit of 0 holds no one and remembers nothing', () => {
    const { counted } = failures(0);
    for (let attempt = 0; attempt < 10; attempt += 1)
      expect(counted.record('192.0.2.1')).toBe(false);
    expect(counted.retryAfterMs('192.0.2.1')).toBeUndefined();
    expect(counted.size()).toBe(0);
  });

  it('remembers at most maxAddresses, forgetting the one that failed longest ago', () => {
    const { counted } = failures(2, { maxAddresses: 2 });
    counted.record('192.0.2.1');
    counted.record('192.0.2.1');
    counted.record('192.0.2.2');
    counted.record('192.0.2.3');
    expect(counted.size()).toBe(2);
    expect(counted.retryAfterMs('192.0.2.1')).toBeUndefined();
  });
});

describe('addressKey', () => {
  it('counts IPv4 as it is, an IPv4-mapped IPv6 address as its IPv4, and IPv6 by its /64 however it is written', () => {
    expect(addressKey('192.0.2.1')).toBe('192.0.2.1');
    expect(addressKey('::ffff:192.0.2.1')).toBe('192.0.2.1');
    expect(addressKey('::FFFF:192.0.2.1')).toBe('192.0.2.1');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('2001:0DB8:0000:0000:abcd::9')).toBe('2001:db8:0:0::/64');
    expect(addressKey('2001:db8:0:7:ffff::1')).toBe('2001:db8:0:7::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('::')).toBe('0:0:0:0::/64');
    expect(addressKey('1::3:4:5:6:1.2.3.4')).toBe('1:0:3:4::/64');
    expect(addressKey('64:ff9b::192.0.2.1')).toBe('64:ff9b:0:0::/64');
  });
});
