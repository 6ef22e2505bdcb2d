import type { Config } from './config.js';
import { NO_KEY_NEEDED, providerKeyOf, resolveCatalogue } from './llm/model-settings.js';
import { MIN_SECRET_CHARS, REDACTED, redactSecrets } from './redaction.js';
import { replaceApiKeys } from './tenancy/api-key-secret.js';
import { headerSecrets } from './tools/header-secrets.js';

/**
 * Secret values the process knows, replaced in every log line: the defence
 * behind the logger's redaction by key path, for a value quoted inside
 * other text (a provider's "Incorrect API key provided: sk-…", an error
 * naming a database URL with its password), which no path names. API keys,
 * which the process never holds in clear, are replaced by their shape (a
 * client that put one in a URL's query has it in the request log).
 */

export interface LogSecrets {
  /** Replaces `value` from now on too: one learnt after the logger was made (the embedded PostgreSQL's password). Short ones are ignored. */
  add(value: string | undefined): void;
  /** `line`, a serialized log line, with every known value and every API key replaced by `[redacted]`. */
  scrub(line: string): string;
}

export function createLogSecrets(values: Iterable<string | undefined> = []): LogSecrets {
  // The forms looked for, longest first, so that a secret holding another
  // is replaced whole. Built once per value, never per line: a line costs
  // one `includes` per form.
  let forms: string[] = [];
  const secrets: LogSecrets = {
    add(value) {
      if (value === undefined || value.length < MIN_SECRET_CHARS) return;
      const added = new Set([...forms, ...formsInJson(value)]);
      forms = [...added].sort((a, b) => b.length - a.length);
    },
    scrub: (line) => replaceApiKeys(redactSecrets(line, forms), REDACTED),
  };
  for (const value of values) secrets.add(value);
  return secrets;
}

/**
 * How `value` is spelt in a JSON line: escaped once inside a string (a
 * message, a stack), twice inside JSON quoted in a string (a provider's
 * error body in a message). The same unless it holds a quote, a backslash
 * or a control character. Never unescaped: a line is JSON throughout, so
 * the raw spelling of such a value would only match other text.
 */
function formsInJson(value: string): string[] {
  const once = JSON.stringify(value).slice(1, -1);
  const twice = JSON.stringify(once).slice(1, -1);
  return [once, twice];
}

/**
 * The secrets the configuration holds: every provider key the model
 * catalogue reads (OPENAI_API_KEY, ANTHROPIC_API_KEY, the variables its
 * providers name in `apiKeyEnv`), the passwords of DATABASE_URL and
 * DATABASE_LISTEN_URL, and what the clients read from `env` for
 * themselves (`clientEnvSecrets`). Assumes `loadConfig` accepted `config`.
 */
export function configuredSecrets(config: Config, env: NodeJS.ProcessEnv): string[] {
  const keys = resolveCatalogue(config).providers.map((provider) => {
    const found = providerKeyOf(provider, { settings: config, env });
    return 'key' in found && found.key !== NO_KEY_NEEDED ? found.key : undefined;
  });
  return [
    config.OPENAI_API_KEY,
    config.ANTHROPIC_API_KEY,
    ...keys,
    ...urlPasswords(config.DATABASE_URL),
    ...urlPasswords(config.DATABASE_LISTEN_URL),
    ...clientEnvSecrets(env),
  ].filter((value): value is string => value !== undefined && value !== '');
}

/**
 * Secrets the SDKs and the pg driver read from the environment on their
 * own and send: both SDKs add the header lines of OPENAI_CUSTOM_HEADERS
 * and ANTHROPIC_CUSTOM_HEADERS to every request (a gateway's key, say),
 * which a provider's error may quote back; pg sends PGPASSWORD when a
 * database URL names no password. The other variables they read that hold
 * secrets are never used here: the clients are given their key (so
 * ANTHROPIC_AUTH_TOKEN and the credential chain are not read), chat
 * completions send no OPENAI_ADMIN_KEY, and no webhook is verified.
 */
function clientEnvSecrets(env: NodeJS.ProcessEnv): string[] {
  const values = [
    ...headerValues(env.OPENAI_CUSTOM_HEADERS),
    ...headerValues(env.ANTHROPIC_CUSTOM_HEADERS),
  ];
  // Keyed by position: only the values count, each line's even where a later one of its name replaces it.
  return [...headerSecrets(Object.fromEntries(values.entries())), env.PGPASSWORD ?? ''];
}

/** The values of `name: value` lines, as both SDKs read them: after the first colon, trimmed. */
function headerValues(text: string | undefined): string[] {
  return (text?.split('\n') ?? []).flatMap((line) => {
    const colon = line.indexOf(':');
    return colon >= 0 ? [line.slice(colon + 1).trim()] : [];
  });
}

/**
 * The password of a postgres URL, in its user part or a `?password=`
 * parameter (which the driver reads too), as written in it
 * (percent-encoded, as an error quoting the URL shows it) and as sent
 * (decoded).
 */
export function urlPasswords(url: string | undefined): string[] {
  if (url === undefined) return [];
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return [];
  }
  const written = parsed.password;
  const passwords = [written, safeDecode(written), ...queryPasswords(url)];
  return [...new Set(passwords)].filter((password) => password !== '');
}

/**
 * The values of the `password` parameters of `url`, as written in its query
 * and as the driver reads them (URLSearchParams: escapes decoded, `+` a
 * space).
 */
function queryPasswords(url: string): string[] {
  const start = url.indexOf('?');
  if (start === -1) return [];
  const query = url.slice(start + 1).split('#')[0] ?? '';
  return query.split('&').flatMap((param) => {
    const equals = param.indexOf('=');
    const [read] = new URLSearchParams(param);
    if (equals === -1 || read?.[0] !== 'password') return [];
    return [param.slice(equals + 1), read[1]];
  });
}

/** `text` percent-decoded, as written when it is not valid percent-encoding. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
