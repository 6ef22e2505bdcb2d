import type { LevelWithSilent, Logger } from 'pino';

/**
 * What the provider SDKs log, written through the service's pino logger.
 * Left to themselves, both SDKs write to the console: lines that are not
 * JSON and that the logger's scrub of known secrets never sees (at debug,
 * each request's and response's headers, a gateway key from
 * OPENAI_CUSTOM_HEADERS among them: the SDKs mask only the standard
 * authorization headers).
 */

/** The levels both SDKs know (their `logLevel` option, OPENAI_LOG and ANTHROPIC_LOG), quietest first. */
export const SDK_LOG_LEVELS = ['off', 'error', 'warn', 'info', 'debug'] as const;
export type SdkLogLevel = (typeof SDK_LOG_LEVELS)[number];

/** The `logger` option of both SDKs: each method takes a message and the SDK's details. */
export interface SdkLogger {
  error(message: string, ...details: unknown[]): void;
  warn(message: string, ...details: unknown[]): void;
  info(message: string, ...details: unknown[]): void;
  debug(message: string, ...details: unknown[]): void;
}

/** The SDKs' default level, which the clients are given when none is set: their warnings only. */
export const DEFAULT_SDK_LOG_LEVEL: SdkLogLevel = 'warn';

/** The SDK levels as pino's: the same names, and `off` is pino's `silent`. */
const PINO_LEVELS: Readonly<Record<SdkLogLevel, LevelWithSilent>> = {
  off: 'silent',
  error: 'error',
  warn: 'warn',
  info: 'info',
  debug: 'debug',
};

/**
 * The pino logger of one provider's SDK client. With `level` set (OPENAI_LOG,
 * ANTHROPIC_LOG), its lines are written at that level whatever LOG_LEVEL
 * says: an operator who asks for an SDK's debug lines gets them without
 * every other debug line of the service. Unset, the SDK logs its warnings
 * and LOG_LEVEL filters them like every other line, so LOG_LEVEL=debug alone
 * never logs each request's body (the prompt) and headers.
 */
export function sdkLog(
  log: Logger,
  options: { component: string; provider: string; level: SdkLogLevel | undefined },
): Logger {
  const bindings = { component: options.component, provider: options.provider };
  return options.level === undefined
    ? log.child(bindings)
    : log.child(bindings, { level: PINO_LEVELS[options.level] });
}

/**
 * `log` as the SDKs call a logger. Their details become fields of the line
 * (an error its `err`), so that the logger's redaction by path applies to
 * them and a reader can query them; never text appended to the message.
 */
export function sdkLogger(log: Logger): SdkLogger {
  return {
    error: (message, ...details) => log.error(fieldsOf(details), message),
    warn: (message, ...details) => log.warn(fieldsOf(details), message),
    info: (message, ...details) => log.info(fieldsOf(details), message),
    debug: (message, ...details) => log.debug(fieldsOf(details), message),
  };
}

/**
 * The SDKs' details as log fields: a plain object's own (a request's
 * `method`, `url`, `headers`, `options`, a response's `status`,
 * `durationMs`, `message`: none of pino's own keys), an error as `err`,
 * anything else in `details`.
 */
function fieldsOf(details: readonly unknown[]): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  const others: unknown[] = [];
  for (const detail of details) {
    if (detail instanceof Error) fields.err = detail;
    else if (isPlainObject(detail)) Object.assign(fields, detail);
    else others.push(detail);
  }
  if (others.length > 0) fields.details = others;
  return fields;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
