import { describe, expect, it } from 'vitest';
import { redactSecrets } from '../../../src/redaction.js';
import { headerSecrets } from '../../../src/tools/header-secrets.js';

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

  it('a value as a query string or a form echoes it, URL-encoded', () => {
    const encoded = headerSecrets({ 'X-Api-Key': 'key/with+chars=' });
    expect(redactSecrets('args: key=key%2Fwith%2Bchars%3D', encoded)).toBe('args: key=[redacted]');
    const spaced = headerSecrets({ 'X-Api-Key': 'two words secret' });
    expect(redactSecrets('form: key=two+words+secret&x=1', spaced)).toBe(
      'form: key=[redacted]&x=1',
    );
    expect(redactSecrets('query: key=two%20words%20secret', spaced)).toBe('query: key=[redacted]');
  });

  it('Basic credentials decoded: `user:password`, and the password alone', () => {
    const basic = headerSecrets({
      Authorization: `Basic ${Buffer.from('robot:s3cret-passw0rd').toString('base64')}`,
    });
    expect(redactSecrets('login robot:s3cret-passw0rd refused', basic)).toBe(
      'login [redacted] refused',
    );
    expect(redactSecrets('password s3cret-passw0rd is wrong for robot', basic)).toBe(
      'password [redacted] is wrong for robot',
    );
  });

  it('a Basic token that decodes to no `user:password` is redacted as it is, and nothing decoded', () => {
    const odd = headerSecrets({ Authorization: 'Basic notbase64atall' });
    expect(odd).toContain('notbase64atall');
    expect(odd.every((secret) => secret.startsWith('Basic') || secret === 'notbase64atall')).toBe(
      true,
    );
  });
});
