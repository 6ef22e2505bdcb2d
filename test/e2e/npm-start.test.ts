import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processesNaming, waymarkProcesses } from '../support/process.js';

const processes = waymarkProcesses();
let dataDir: string | undefined;

afterEach(async () => processes.killAll());
afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('npm start', () => {
  it('SIGTERM to npm reaches the service: it exits 0 and leaves no PostgreSQL behind', async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-npm-'));
    const waymark = await processes.start({ via: 'npm-start', env: { WAYMARK_DATA_DIR: dataDir } });
    await waymark.waitUntilReady(60_000);
    const key = (await readFile(path.join(dataDir, 'admin-key'), 'utf8')).trim();
    const me = await fetch(`${waymark.url}/v1/me`, { headers: { authorization: `Bearer ${key}` } });
    expect(me.status).toBe(200);

    const exit = await waymark.stop('SIGTERM', 60_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(waymark.stdout()).toContain('"msg":"waymark stopped"');
    expect(await processesNaming(dataDir)).toEqual([]);
  }, 120_000);
});
