import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { configuredSecrets, createLogSecrets, urlPasswords } from '../../src/log-secrets.js';
import { createLogger } from '../../src/logger.js';
import { MIN_SECRET_CHARS } from '../../src/redaction.js';
import { generateApiKey } from '../../src/tenancy/api-key-secret.js';

/** A line as pino writes it: JSON, `text` inside a string. */
function lineWith(text: string): string {
  return JSON.stringify({ level: 50, msg: text });
}

describe('createLogSecrets: scrub', () => {
  it('replaces every known value, each time it appears', () => {
    const secrets = createLogSecrets(['sk-first-secret-1', 'second-secret-22']);
    const line = lineWith(
      'sent sk-first-secret-1 then second-secret-22, and sk-first-secret-1 again',
    );
    expect(JSON.parse(secrets.scrub(line))).toEqual({
      level: 50,
      msg: 'sent [redacted] then [redacted], and [redacted] again',
    });
  });

  it(`skips values shorter than ${MIN_SECRET_CHARS} characters, and unset ones`, () => {
    const short = 'x'.repeat(MIN_SECRET_CHARS - 1);
    const long = 'y'.repeat(MIN_SECRET_CHARS);
    const secrets = createLogSecrets(['x', short, '', undefined, long]);
    expect(secrets.scrub(lineWith(`x ${short} ${long}`))).toBe(lineWith(`x ${short} [redacted]`));
  });

  it('a value holding a quote or a backslash: found as JSON escapes it, once and quoted twice', () => {
    const secret = 'pa"ss\\word-3333';
    const secrets = createLogSecrets([secret]);
    const once = lineWith(`auth failed for ${secret}`);
    expect(once).not.toContain(secret);
    expect(JSON.parse(secrets.scrub(once))).toMatchObject({ msg: 'auth failed for [redacted]' });
    // A provider's JSON error body quoted in a message.
    const twice = lineWith(`401 ${JSON.stringify({ error: { message: `bad key ${secret}` } })}`);
    expect(JSON.parse(secrets.scrub(twice))).toMatchObject({
      msg: '401 {"error":{"message":"bad key [redacted]"}}',
    });
  });

  it('a value holding another is replaced whole, whichever was given first', () => {
    const secrets = createLogSecrets(['abcdefgh', 'abcdefgh-and-more']);
    expect(secrets.scrub(lineWith('abcdefgh-and-more'))).toBe(lineWith('[redacted]'));
  });

  it('an API key, known or not, by its shape; not the prefix a listing shows, nor a longer token', () => {
    const key = generateApiKey();
    const line = lineWith(
      `GET /v1/me?api_key=${key.secret}&x=1 prefix ${key.prefix} longer ${key.secret}A`,
    );
    expect(JSON.parse(createLogSecrets().scrub(line))).toMatchObject({
      msg: `GET /v1/me?api_key=[redacted]&x=1 prefix ${key.prefix} longer ${key.secret}A`,
    });
  });

  it('a value added later is replaced from then on', () => {
    const secrets = createLogSecrets();
    const line = lineWith('postgres://postgres:later-password-4444@127.0.0.1');
    expect(secrets.scrub(line)).toBe(line);
    secrets.add('later-password-4444');
    expect(secrets.scrub(line)).toBe(lineWith('postgres://postgres:[redacted]@127.0.0.1'));
  });
});

describe('createLogger with secrets', () => {
  it('an error’s message, stack and cause, through a child logger: the line has none of the value', () => {
    const secret = 'sk-"quoted"-key-5555';
    let written = '';
    const sink = new Writable({
      write(chunk, _encoding, done) {
        written += String(chunk);
        done();
      },
    });
    const log = createLogger(
      { LOG_LEVEL: 'info' },
      { destination: sink, secrets: createLogSecrets([secret]) },
    );
    const cause = new Error(`Incorrect API key provided: ${secret}`);
    log
      .child({ component: 'test' })
      .error({ err: new Error(`call failed with ${secret}`, { cause }) }, `about ${secret}`);
    const line = JSON.parse(written) as { msg: string; err: { message: string; stack: string } };
    expect(written).not.toContain('quoted');
    expect(line.msg).toBe('about [redacted]');
    // pino's error serializer appends the cause's message.
    expect(line.err.message).toBe(
      'call failed with [redacted]: Incorrect API key provided: [redacted]',
    );
    expect(line.err.stack).toContain('caused by: Error: Incorrect API key provided: [redacted]');
  });
});

describe('configuredSecrets', () => {
  it('every provider key the catalogue reads and the database URLs’ passwords; not the placeholder of a server that needs no key', () => {
    const env = {
      OPENAI_API_KEY: ' sk-openai-vendor-key ',
      ANTHROPIC_API_KEY: 'sk-ant-vendor-key',
      TEAM_KEY: 'sk-team-named-key',
      DATABASE_URL: 'postgres://waymark:p%40ss-word-1@db.example.com/waymark',
      DATABASE_LISTEN_URL: 'postgres://waymark@db.example.com/waymark?password=listen-password',
      WAYMARK_MODELS: JSON.stringify({
        providers: [
          {
            name: 'team',
            kind: 'openai',
            baseUrl: 'https://llm.example.com/v1',
            apiKeyEnv: 'TEAM_KEY',
          },
          { name: 'local', kind: 'openai', baseUrl: 'http://127.0.0.1:11434/v1' },
          { name: 'ant', kind: 'anthropic' },
        ],
        models: [
          { name: 'a', provider: 'team', modelId: 'a', contextWindow: 8000, maxOutputTokens: 100 },
          { name: 'b', provider: 'local', modelId: 'b', contextWindow: 8000, maxOutputTokens: 100 },
          { name: 'c', provider: 'ant', modelId: 'c', contextWindow: 8000, maxOutputTokens: 100 },
        ],
        defaultModel: 'a',
      }),
    };
    const secrets = configuredSecrets(loadConfig(env), env);
    expect(new Set(secrets)).toEqual(
      new Set([
        'sk-openai-vendor-key',
        'sk-ant-vendor-key',
        'sk-team-named-key',
        'p%40ss-word-1',
        'p@ss-word-1',
        'listen-password',
      ]),
    );
  });

  it('what the clients read from the environment for themselves: each value of the SDKs’ custom header lines and PGPASSWORD, replaced in a line quoting them', () => {
    const env = {
      OPENAI_CUSTOM_HEADERS: 'X-Gateway-Key: oai-gateway-key-1\nnot a header line\nX-Short: abc',
      ANTHROPIC_CUSTOM_HEADERS: 'Proxy-Authorization: Bearer ant-proxy-token-2',
      PGPASSWORD: 'pg-env-password-3',
    };
    const secrets = configuredSecrets(loadConfig(env), env);
    expect(secrets).toEqual(
      expect.arrayContaining([
        'oai-gateway-key-1',
        'Bearer ant-proxy-token-2',
        'ant-proxy-token-2',
        'pg-env-password-3',
      ]),
    );
    const line = lineWith(
      'gateway said: unknown oai-gateway-key-1 for Bearer ant-proxy-token-2, then token ant-proxy-token-2; db: pg-env-password-3 (abc)',
    );
    expect(JSON.parse(createLogSecrets(secrets).scrub(line))).toMatchObject({
      msg: 'gateway said: unknown [redacted] for [redacted], then token [redacted]; db: [redacted] (abc)',
    });
  });

  it('nothing when nothing secret is configured (the scripted model, the embedded database)', () => {
    expect(configuredSecrets(loadConfig({}), {})).toEqual([]);
  });
});

describe('urlPasswords', () => {
  it('as written and decoded, a ?password= too; none for a URL without one or one that does not parse', () => {
    expect(urlPasswords('postgres://u:a%2Fb%25c@h/d')).toEqual(['a%2Fb%25c', 'a/b%c']);
    expect(urlPasswords('postgres://u:plain@h/d?password=other')).toEqual(['plain', 'other']);
    // A parameter's too, as written and as the driver reads it (URLSearchParams: `+` is a space).
    expect(urlPasswords('postgres://u@h/d?sslmode=off&password=p%40ss+word%2B1')).toEqual([
      'p%40ss+word%2B1',
      'p@ss word+1',
    ]);
    // A parameter without a value names no password: the word itself is not one.
    expect(urlPasswords('postgres://u@h/d?password&x=1')).toEqual([]);
    expect(urlPasswords('postgres://u@h/d')).toEqual([]);
    expect(urlPasswords('not a url')).toEqual([]);
    expect(urlPasswords(undefined)).toEqual([]);
  });
});
