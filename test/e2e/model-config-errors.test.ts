import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { waymarkProcesses } from '../support/process.js';

/**
 * Settings checked against the model catalogue (WAYMARK_DEFAULT_MODEL, a
 * catalogue provider's key variable) stop the process like any bad
 * variable: before anything starts (no embedded PostgreSQL initialised),
 * one stderr line each under `waymark: invalid configuration:`, listed
 * with the other problems, exit code 2.
 */

const processes = waymarkProcesses();
const dirs: string[] = [];
afterEach(async () => processes.killAll());
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

function linesNaming(stderr: string, name: string): string[] {
  return stderr.split('\n').filter((line) => line.trim().startsWith(`${name}:`));
}

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-model-config-'));
  dirs.push(dir);
  return dir;
}

describe('configuration checked against the catalogue', () => {
  it('WAYMARK_DEFAULT_MODEL naming no model: reported like any bad variable, before any database is touched', async () => {
    const dataDir = await tempDir();
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, WAYMARK_DEFAULT_MODEL: 'no-such-model' },
    });
    const exit = await waymark.waitForExit(60_000);
    expect(exit.code).toBe(2); // the exit code of every other configuration error
    expect(waymark.stderr()).toContain('waymark: invalid configuration:');
    expect(linesNaming(waymark.stderr(), 'WAYMARK_DEFAULT_MODEL')).toHaveLength(1);
    // Nothing started: no PostgreSQL cluster initialised for a run that cannot start.
    expect(existsSync(path.join(dataDir, 'postgres'))).toBe(false);
  }, 90_000);

  it('every problem at once: PORT=abc and an unknown WAYMARK_DEFAULT_MODEL are both named', async () => {
    const dataDir = await tempDir();
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, PORT: 'abc', WAYMARK_DEFAULT_MODEL: 'no-such-model' },
    });
    await waymark.waitForExit(60_000);
    expect(linesNaming(waymark.stderr(), 'PORT')).toHaveLength(1);
    expect(linesNaming(waymark.stderr(), 'WAYMARK_DEFAULT_MODEL')).toHaveLength(1);
  }, 90_000);

  it('a catalogue provider whose apiKeyEnv variable is unset: reported like any bad variable', async () => {
    const dataDir = await tempDir();
    const waymark = await processes.start({
      env: {
        WAYMARK_DATA_DIR: dataDir,
        WAYMARK_MODELS: JSON.stringify({
          providers: [{ name: 'anthropic', kind: 'anthropic', apiKeyEnv: 'MY_ANTHROPIC_KEY' }],
          models: [
            {
              name: 'claude-fast',
              provider: 'anthropic',
              modelId: 'claude-haiku-4-5',
              contextWindow: 200000,
              maxOutputTokens: 64000,
            },
          ],
          defaultModel: 'claude-fast',
        }),
      },
    });
    const exit = await waymark.waitForExit(60_000);
    expect(exit.code).toBe(2);
    expect(linesNaming(waymark.stderr(), 'MY_ANTHROPIC_KEY')).toHaveLength(1);
    expect(existsSync(path.join(dataDir, 'postgres'))).toBe(false);
  }, 90_000);
});
