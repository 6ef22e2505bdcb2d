import { describe, expect, it } from 'vitest';
import { generateApiKey, hashApiKey, looksLikeApiKey } from '../../src/tenancy/api-key-secret.js';

describe('API key secrets', () => {
  it('carry at least 32 random bytes behind the wmk_ prefix', () => {
    const { secret } = generateApiKey();
    expect(secret.startsWith('wmk_')).toBe(true);
    expect(Buffer.from(secret.slice(4), 'base64url').length).toBeGreaterThanOrEqual(32);
  });

  it('are different every time', () => {
    const secrets = new Set(Array.from({ length: 1000 }, () => generateApiKey().secret));
    expect(secrets.size).toBe(1000);
  });

  it('are stored as a SHA-256 hash that does not contain the secret', () => {
    const key = generateApiKey();
    expect(key.hash).toEqual(hashApiKey(key.secret));
    expect(key.hash.length).toBe(32);
    expect(key.hash.toString('utf8')).not.toContain(key.secret.slice(4, 20));
  });

  it('keep only a short display prefix in clear', () => {
    const key = generateApiKey();
    expect(key.secret.startsWith(key.prefix)).toBe(true);
    expect(key.prefix.length).toBe(12);
  });

  it('are recognised by shape before any lookup', () => {
    expect(looksLikeApiKey(generateApiKey().secret)).toBe(true);
    expect(looksLikeApiKey('wmk_short')).toBe(false);
    expect(looksLikeApiKey(`sk_${'a'.repeat(43)}`)).toBe(false);
  });
});
