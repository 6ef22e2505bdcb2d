import { describe, expect, it } from 'vitest';
import { headerSecrets, redactSecrets } from '../../../src/tools/header-secrets.js';

describe('redacting a tool’s header values from what its server answers', () => {
  const secrets = headerSecrets({
    Authorization: 'Bearer abc123def456',
    'X-Api-Key': 'k"ey\\with-quotes',
    'X-Team': 'core',
  });

  it('the whole value, and its credentials without the scheme', () => {
    expect(redactSecrets('got Bearer abc123def456 and abc123def456', secrets)).toBe(
      'got [redacted] and [redacted]',
    );
  });

  it('a value as it appears inside a JSON string, its quotes and backslashes escaped', () => {
    const echoed = JSON.stringify({ 'x-api-key': 'k"ey\\with-quotes' });
    expect(redactSecrets(echoed, secrets)).toBe('{"x-api-key":"[redacted]"}');
  });

  it('a value under 8 characters is left alone: it would blank out ordinary words', () => {
    expect(redactSecrets('the core team', secrets)).toBe('the core team');
  });
});
