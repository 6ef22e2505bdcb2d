import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

function retentionProblems(value: string): string[] {
  try {
    loadConfig({ WORKFLOW_RETENTION_DAYS: value });
    return [];
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
}

describe('WORKFLOW_RETENTION_DAYS and RETENTION_SWEEP_INTERVAL_MS', () => {
  it('0 (keep forever) and the largest value, 36,500 days, are accepted as given', () => {
    expect(loadConfig({ WORKFLOW_RETENTION_DAYS: '0' }).WORKFLOW_RETENTION_DAYS).toBe(0);
    expect(loadConfig({ WORKFLOW_RETENTION_DAYS: ' 36500 ' }).WORKFLOW_RETENTION_DAYS).toBe(36_500);
  });

  it.each(['-1', '1.5', '36501', '1e3', 'thirty', '99999999999999999999'])(
    'refuses %s and says what it expected',
    (value) => {
      expect(retentionProblems(value)).toEqual([
        expect.stringMatching(/^WORKFLOW_RETENTION_DAYS: .*(0 to 36500|36500)/),
      ]);
    },
  );

  it('refuses a sweep interval under a second or over a week', () => {
    for (const value of ['999', '604800001', '-1000']) {
      expect(() => loadConfig({ RETENTION_SWEEP_INTERVAL_MS: value })).toThrow(
        /RETENTION_SWEEP_INTERVAL_MS/,
      );
    }
  });
});

describe('PAUSED_WORKFLOW_EXPIRY_DAYS', () => {
  it('is 0 (paused workflows wait forever) unless set, and takes whole days up to 36,500', () => {
    expect(loadConfig({}).PAUSED_WORKFLOW_EXPIRY_DAYS).toBe(0);
    expect(loadConfig({ PAUSED_WORKFLOW_EXPIRY_DAYS: '14' }).PAUSED_WORKFLOW_EXPIRY_DAYS).toBe(14);
    for (const value of ['-1', '1.5', '36501', 'a week']) {
      expect(() => loadConfig({ PAUSED_WORKFLOW_EXPIRY_DAYS: value })).toThrow(
        /PAUSED_WORKFLOW_EXPIRY_DAYS/,
      );
    }
  });
});
