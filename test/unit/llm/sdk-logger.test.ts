import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Config } from '../../../src/config.js';
import { type SdkLogLevel, sdkLog, sdkLogger } from '../../../src/llm/sdk-logger.js';

/** The lines a logger at `level` writes, parsed, and the SDK logger of one provider over it. */
function sdkLoggerOver(level: Config['LOG_LEVEL'], sdkLevel: SdkLogLevel | undefined) {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  const log = sdkLog(pino({ level }, sink), {
    component: 'openai-sdk',
    provider: 'oai',
    level: sdkLevel,
  });
  return { lines, logger: sdkLogger(log) };
}

describe('the SDKs’ logger', () => {
  it('a request’s details become fields of the line, an error its err, anything else its details', () => {
    const { lines, logger } = sdkLoggerOver('debug', 'debug');
    logger.debug(
      '[log_1] sending request',
      { method: 'post', url: 'http://x/v1', headers: { 'x-team': 'research' } },
      new Error('socket hang up'),
      42,
    );
    expect(lines).toEqual([
      expect.objectContaining({
        level: 20,
        component: 'openai-sdk',
        provider: 'oai',
        msg: '[log_1] sending request',
        method: 'post',
        url: 'http://x/v1',
        headers: { 'x-team': 'research' },
        err: expect.objectContaining({ type: 'Error', message: 'socket hang up' }),
        details: [42],
      }),
    ]);
  });

  it('each SDK level is written at pino’s level of the same name', () => {
    const { lines, logger } = sdkLoggerOver('debug', 'debug');
    logger.error('e');
    logger.warn('w');
    logger.info('i');
    logger.debug('d');
    expect(lines.map((line) => [line.level, line.msg])).toEqual([
      [50, 'e'],
      [40, 'w'],
      [30, 'i'],
      [20, 'd'],
    ]);
  });

  it('an SDK level set (OPENAI_LOG=debug) writes its lines whatever LOG_LEVEL says; off writes none', () => {
    const debug = sdkLoggerOver('error', 'debug');
    debug.logger.debug('d');
    expect(debug.lines.map((line) => line.msg)).toEqual(['d']);
    const off = sdkLoggerOver('debug', 'off');
    off.logger.error('e');
    expect(off.lines).toEqual([]);
  });

  it('no SDK level set: LOG_LEVEL filters its lines as any other', () => {
    const { lines, logger } = sdkLoggerOver('error', undefined);
    logger.warn('w');
    logger.error('e');
    expect(lines.map((line) => line.msg)).toEqual(['e']);
  });
});
