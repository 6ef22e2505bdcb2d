import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, configVariables, loadConfig } from '../../src/config.js';
import { usesPreparedStatements } from '../../src/services.js';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected the configuration to be rejected');
}

describe('loadConfig', () => {
  it('applies the documented defaults to an empty environment', () => {
    const config = loadConfig({});
    expect(config.PORT).toBe(8080);
    expect(config.HOST).toBe('127.0.0.1');
    expect(config.DATABASE_URL).toBeUndefined();
    expect(config.WAYMARK_DATA_DIR).toBe(path.resolve('.waymark'));
    expect(config.LOG_LEVEL).toBe('info');
    expect(config.SHUTDOWN_GRACE_MS).toBe(10_000);
    expect(config.TRUST_PROXY).toBe(false);
  });

  it('parses numbers, booleans and URLs from strings', () => {
    const config = loadConfig({
      PORT: '3000',
      DATABASE_URL: 'postgresql://u:p@db.internal:5432/waymark',
      TRUST_PROXY: 'true',
      WAYMARK_DATA_DIR: '/var/lib/waymark',
    });
    expect(config.PORT).toBe(3000);
    expect(config.DATABASE_URL).toBe('postgresql://u:p@db.internal:5432/waymark');
    expect(config.TRUST_PROXY).toBe(true);
    expect(config.WAYMARK_DATA_DIR).toBe('/var/lib/waymark');
  });

  it('treats an empty value as unset', () => {
    expect(loadConfig({ PORT: '', DATABASE_URL: '  ' }).PORT).toBe(8080);
  });

  it('reports every wrong variable at once, one line each, naming it', () => {
    const problems = problemsOf({ PORT: 'abc', DATABASE_URL: 'nonsense', LOG_LEVEL: 'loud' });
    expect(problems).toHaveLength(3);
    expect(problems.find((line) => line.startsWith('PORT:'))).toContain('"abc"');
    expect(problems.find((line) => line.startsWith('LOG_LEVEL:'))).toContain('"loud"');
    expect(problems.some((line) => line.startsWith('DATABASE_URL:'))).toBe(true);
  });

  it('an SDK log level the SDKs do not know (OPENAI_LOG, ANTHROPIC_LOG) stops the start', () => {
    const problems = problemsOf({ OPENAI_LOG: 'verbose', ANTHROPIC_LOG: 'trace' });
    expect(problems.map((line) => line.split(':')[0])).toEqual(['OPENAI_LOG', 'ANTHROPIC_LOG']);
    expect(loadConfig({ OPENAI_LOG: 'debug' }).OPENAI_LOG).toBe('debug');
  });

  it('never echoes the database URL, which may hold a password', () => {
    const [line] = problemsOf({ DATABASE_URL: 'mysql://admin:hunter2@db/x' });
    expect(line).toMatch(/^DATABASE_URL:/);
    expect(line).not.toContain('hunter2');
  });

  it('rejects out-of-range ports and non-integer numbers', () => {
    expect(problemsOf({ PORT: '70000' })[0]).toMatch(/^PORT:/);
    expect(problemsOf({ SHUTDOWN_GRACE_MS: '1.5' })[0]).toMatch(/^SHUTDOWN_GRACE_MS:/);
  });

  it('refuses a lease renewed no sooner than it expires', () => {
    expect(problemsOf({ WORKFLOW_LEASE_MS: '5000', WORKFLOW_LEASE_RENEW_MS: '5000' })[0]).toMatch(
      /^WORKFLOW_LEASE_RENEW_MS: must be less than WORKFLOW_LEASE_MS/,
    );
    expect(
      loadConfig({ WORKFLOW_LEASE_MS: '5000', WORKFLOW_LEASE_RENEW_MS: '1000' }),
    ).toMatchObject({
      WORKFLOW_LEASE_MS: 5000,
      WORKFLOW_LEASE_RENEW_MS: 1000,
    });
  });

  it('CORS origins: a trimmed list, off when unset; anything but scheme://host[:port] or * is named', () => {
    expect(loadConfig({}).CORS_ALLOWED_ORIGINS).toEqual([]);
    expect(
      loadConfig({ CORS_ALLOWED_ORIGINS: ' https://app.example.com ,http://localhost:5173,' })
        .CORS_ALLOWED_ORIGINS,
    ).toEqual(['https://app.example.com', 'http://localhost:5173']);
    expect(loadConfig({ CORS_ALLOWED_ORIGINS: '*' }).CORS_ALLOWED_ORIGINS).toEqual(['*']);
    const problems = problemsOf({
      CORS_ALLOWED_ORIGINS: 'app.example.com,https://app.example.com/,ftp://files.example.com',
    });
    expect(problems).toHaveLength(3);
    for (const origin of [
      'app.example.com',
      'https://app.example.com/',
      'ftp://files.example.com',
    ]) {
      expect(problems).toContainEqual(
        expect.stringContaining(`"${origin}" is not an origin such as https://app.example.com`),
      );
    }
    expect(problems.every((line) => line.startsWith('CORS_ALLOWED_ORIGINS:'))).toBe(true);
  });

  it('host lists: patterns parsed, an entry that is no host named', () => {
    expect(
      loadConfig({ HTTP_TOOLS_ALLOWED_HOSTS: 'tools.internal, *.example.com' })
        .HTTP_TOOLS_ALLOWED_HOSTS,
    ).toEqual(['tools.internal', '*.example.com']);
    expect(problemsOf({ HTTP_FETCH_ALLOWED_HOSTS: 'https://docs.example.com' })).toEqual([
      expect.stringMatching(
        /^HTTP_FETCH_ALLOWED_HOSTS: "https:\/\/docs.example.com" is not a host name, a \*.domain wildcard or an IP/,
      ),
    ]);
  });

  it('lists every variable it reads', () => {
    expect(configVariables).toContain('PORT');
    expect(configVariables).toContain('WAYMARK_DATA_DIR');
    expect(new Set(configVariables).size).toBe(configVariables.length);
  });

  it('prepared statements: auto means on with the embedded PostgreSQL only; on and off are as they say', () => {
    const url = 'postgres://waymark:secret@db.internal:5432/waymark';
    expect(usesPreparedStatements(loadConfig({}))).toBe(true);
    expect(usesPreparedStatements(loadConfig({ DATABASE_URL: url }))).toBe(false);
    expect(
      usesPreparedStatements(loadConfig({ DATABASE_URL: url, DATABASE_PREPARED_STATEMENTS: 'on' })),
    ).toBe(true);
    expect(usesPreparedStatements(loadConfig({ DATABASE_PREPARED_STATEMENTS: 'off' }))).toBe(false);
    expect(problemsOf({ DATABASE_PREPARED_STATEMENTS: 'yes' })[0]).toMatch(
      /^DATABASE_PREPARED_STATEMENTS:/,
    );
  });
});
