import pino, {
  type DestinationStream,
  type Logger,
  type LoggerOptions,
  type SerializedError,
} from 'pino';
import type { Config } from './config.js';
import type { LogSecrets } from './log-secrets.js';
import { REDACTED } from './redaction.js';

/**
 * Paths removed from every log line. Keys and passwords must never reach a
 * log store; Fastify's request serializer does not log headers, but child
 * loggers and error objects may carry them.
 */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  'authorization',
  'secret',
  'password',
  'apiKey',
  '*.authorization',
  '*.secret',
  '*.password',
  '*.apiKey',
  '*.databaseUrl',
];

/**
 * The service's logger; to stdout unless given a `destination` (tests read
 * what it writes). Each line it writes, serialized whole (`err` with its
 * message, stack and cause included), has the values of `secrets` replaced:
 * the paths above only catch a secret under its own name.
 */
export function createLogger(
  config: Pick<Config, 'LOG_LEVEL'>,
  options: { destination?: DestinationStream; secrets?: LogSecrets } = {},
): Logger {
  const { destination, secrets } = options;
  const loggerOptions: LoggerOptions = {
    level: config.LOG_LEVEL,
    base: { service: 'waymark', pid: process.pid },
    redact: { paths: REDACTED_PATHS, censor: REDACTED },
    serializers: { err: serializeError },
    timestamp: pino.stdTimeFunctions.isoTime,
    // The one hook that sees the line as written, after serializers, redaction and child bindings.
    ...(secrets ? { hooks: { streamWrite: (line: string) => secrets.scrub(line) } } : {}),
  };
  return destination ? pino(loggerOptions, destination) : pino(loggerOptions);
}

/**
 * SQLSTATE class 23, integrity constraint violations: their detail quotes
 * the values of the row or key refused ("Failing row contains (…)" for
 * NOT NULL and CHECK, the whole row, an HTTP tool's headers included, each
 * value cut at 64 bytes, so the head of a secret that no scrub matches;
 * "Key (…)=(…)" for unique and foreign keys).
 */
const INTEGRITY_VIOLATION = /^23[0-9A-Z]{3}$/;

/**
 * An `err` as pino serializes it, but a constraint violation's detail
 * replaced: the message, `table`, `column` and `constraint` still say what
 * was refused, which is what an operator needs.
 */
function serializeError(error: Error): SerializedError {
  const serialized = pino.stdSerializers.err(error);
  // Anything can be logged as `err`; the serializer hands back what is not an error as it is.
  if (typeof serialized !== 'object' || serialized === null) return serialized;
  const { code, detail } = serialized as { code?: unknown; detail?: unknown };
  if (typeof code === 'string' && INTEGRITY_VIOLATION.test(code) && detail !== undefined) {
    serialized.detail = REDACTED;
  }
  return serialized;
}

/**
 * A URL as logged: values of query parameters that carry secrets (stream
 * tokens in `?token=`) are replaced, since request logs record the URL. A
 * parameter is matched by its name as the query parser reads it, percent
 * escapes decoded: `?tok%65n=` authenticates as `?token=` does.
 */
export function redactUrl(url: string): string {
  const start = url.indexOf('?');
  if (start === -1) return url;
  const params = url
    .slice(start + 1)
    .split('&')
    .map((param) => {
      const equals = param.indexOf('=');
      if (equals === -1) return param;
      const name = param.slice(0, equals);
      return decodedName(name).toLowerCase() === 'token' ? `${name}=[redacted]` : param;
    });
  return `${url.slice(0, start + 1)}${params.join('&')}`;
}

/** A query parameter's name as the query parser reads it; as written when it is not valid percent-encoding, as the parser keeps it. */
function decodedName(name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return name;
  }
}
