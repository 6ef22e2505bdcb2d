import pino, { type DestinationStream, type Logger } from 'pino';
import type { Config } from './config.js';

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

/** The service's logger; to stdout unless given a `destination` (tests read what it writes). */
export function createLogger(
  config: Pick<Config, 'LOG_LEVEL'>,
  destination?: DestinationStream,
): Logger {
  const options = {
    level: config.LOG_LEVEL,
    base: { service: 'waymark', pid: process.pid },
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination) : pino(options);
}

/**
 * A URL as logged: values of query parameters that carry secrets (stream
 * tokens in `?token=`) are replaced, since request logs record the URL.
 */
export function redactUrl(url: string): string {
  return url.replace(/([?&]token=)[^&#]*/gi, '$1[redacted]');
}
