import { describe, expect, it } from 'vitest';
import { redactSecretsIn } from '../../src/redaction.js';

describe('redactSecretsIn', () => {
  it('replaces the secrets in every string of a JSON value, keys too, and leaves the rest and the original alone', () => {
    const listed = {
      name: 'whoami',
      description: 'Who holds tok-secret-1234',
      inputSchema: {
        type: 'object',
        properties: { 'tok-secret-1234': { default: ['x', 'tok-secret-1234'], maximum: 3 } },
        required: [],
        additionalProperties: false,
      },
      cursor: null,
    };
    const before = structuredClone(listed);
    expect(redactSecretsIn(listed, ['tok-secret-1234'])).toEqual({
      name: 'whoami',
      description: 'Who holds [redacted]',
      inputSchema: {
        type: 'object',
        properties: { '[redacted]': { default: ['x', '[redacted]'], maximum: 3 } },
        required: [],
        additionalProperties: false,
      },
      cursor: null,
    });
    expect(listed).toEqual(before);
  });
});
