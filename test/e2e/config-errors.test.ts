import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waymarkProcesses } from '../support/process.js';

/**
 * A broken configuration stops the process before it touches a database or
 * a port, naming every bad variable at once, one per line.
 */

const processes = waymarkProcesses();
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-config-'));
});

afterEach(async () => {
  await processes.killAll();
});

afterAll(async () => {
  await processes.killAll();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

/** stderr lines that start with `NAME:`, as loadConfig reports a variable. */
function linesNaming(stderr: string, name: string): string[] {
  return stderr.split('\n').filter((line) => line.trim().startsWith(`${name}:`));
}

describe('configuration errors', () => {
  it('PORT=abc and DATABASE_URL=nonsense: exits non-zero before listening, one stderr line for each, without echoing the URL', async () => {
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, PORT: 'abc', DATABASE_URL: 'nonsense' },
    });
    const exit = await waymark.waitForExit(30_000);

    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    const stderr = waymark.stderr();
    expect(linesNaming(stderr, 'PORT')).toHaveLength(1);
    expect(linesNaming(stderr, 'DATABASE_URL')).toHaveLength(1);
    // A database URL may hold a password: the report names the variable, not its value.
    expect(stderr).not.toContain('nonsense');
    // Nothing was logged, so nothing started: no database, no listener.
    expect(waymark.stdout()).toBe('');
  }, 60_000);

  it('LOG_LEVEL=loud: exits non-zero and names LOG_LEVEL', async () => {
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, LOG_LEVEL: 'loud' },
    });
    const exit = await waymark.waitForExit(30_000);

    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    const lines = linesNaming(waymark.stderr(), 'LOG_LEVEL');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('loud');
    expect(waymark.stdout()).toBe('');
  }, 60_000);
});
