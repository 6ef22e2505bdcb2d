import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processesNaming, type WaymarkProcess, waymarkProcesses } from '../support/process.js';

/**
 * A first start killed during initdb (SIGKILL: the OOM killer, `docker
 * kill`, a stop timeout), whether initdb runs on to its end or dies with
 * it, leaves a data folder the next start sets up anew: the password file
 * is written before initdb and read by it, the cluster is initialised
 * aside and moved into `postgres/` only when whole, and no copy of the
 * password is left in plain text.
 */

const processes = waymarkProcesses();
const dirs: string[] = [];
afterEach(async () => processes.killAll());
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** A first start on a fresh data folder, SIGKILLed while its initdb runs. */
async function killedDuringInitdb(options: { initdbToo: boolean }): Promise<string> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-initdb-kill-'));
  dirs.push(dataDir);
  const first = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
  await first.waitForStdout(/initialising embedded PostgreSQL cluster/, 30_000);
  await sleep(200);
  first.signal('SIGKILL');
  await first.waitForExit(10_000);
  if (options.initdbToo) {
    const initdb = await processesNaming(dataDir);
    expect(initdb.length).toBeGreaterThan(0);
    for (const pid of initdb) process.kill(pid, 'SIGKILL');
  } else {
    await sleep(5_000); // initdb, orphaned, runs on to its end
  }
  return dataDir;
}

async function expectStartsWhole(next: WaymarkProcess): Promise<void> {
  await next.waitUntilReady(60_000);
  expect((await readdir(next.dataDir)).sort()).toEqual([
    'admin-key',
    'postgres',
    'postgres-password',
    'socket',
  ]);
  expect((await stat(path.join(next.dataDir, 'postgres-password'))).mode & 0o777).toBe(0o600);
  expect((await next.stop()).code).toBe(0);
}

describe('SIGKILL during the first start’s initdb', () => {
  it('initdb runs on to its end: the next start on the same data folder gets ready', async () => {
    const dataDir = await killedDuringInitdb({ initdbToo: false });
    await expectStartsWhole(await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } }));
  }, 120_000);

  it('initdb killed too: the next start on the same data folder gets ready', async () => {
    const dataDir = await killedDuringInitdb({ initdbToo: true });
    await expectStartsWhole(await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } }));
  }, 120_000);
});
