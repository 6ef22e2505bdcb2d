import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processesNaming, waymarkProcesses } from '../support/process.js';

/**
 * `postgres/postmaster.pid` outlives a crash or a power loss, and after a
 * reboot (or a container restart) its pid may be an unrelated process's,
 * re-parented to init like any daemon. The next start signals only a
 * process that is this cluster's server: a PostgreSQL orphaned by a killed
 * Waymark is stopped, an unrelated process is left alone and the stale
 * file is removed, so the start gets ready either way.
 */

const processes = waymarkProcesses();
let dataDir: string | undefined;
let bystander: number | undefined;
afterEach(async () => processes.killAll());
afterAll(async () => {
  if (bystander) {
    try {
      process.kill(bystander, 'SIGKILL');
    } catch {
      // It ended already.
    }
  }
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** A process re-parented to init, as any daemon is: `sleep` left behind by a shell that exits. */
async function daemonLikeProcess(): Promise<number> {
  // Node, not `sleep`: a shell's background job ignores SIGINT, Node resets it to the default.
  const script = `"${process.execPath}" -e "setInterval(() => {}, 1e6)" >/dev/null 2>&1 & echo $!`;
  const shell = spawn('sh', ['-c', script], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let out = '';
  shell.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  await new Promise((resolve) => shell.once('close', resolve));
  const pid = Number(out.trim());
  for (let i = 0; i < 50 && parentOf(pid) !== 1; i += 1) await sleep(20);
  return pid;
}

describe.sequential('a postmaster.pid left behind by an earlier run', () => {
  it('its pid now an unrelated process’s: the next start leaves that process alone, removes the file and gets ready', async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-stale-pid-'));
    const first = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
    await first.waitUntilReady(60_000);
    expect((await first.stop()).code).toBe(0);

    bystander = await daemonLikeProcess();
    expect(parentOf(bystander)).toBe(1);
    const cluster = path.join(dataDir, 'postgres');
    // What a crashed server leaves: its pid on the first line, then the data folder, ...
    await writeFile(
      path.join(cluster, 'postmaster.pid'),
      `${bystander}\n${cluster}\n1700000000\n5432\n\n127.0.0.1\n  5432001         0\nready   \n`,
    );

    const second = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
    await second.waitUntilReady(60_000);
    expect(alive(bystander), 'the unrelated process was killed').toBe(true);
    expect(second.stdout()).not.toContain('stopping an orphaned embedded PostgreSQL');
    expect(second.stdout()).toContain('postmaster.pid is stale');
    expect((await second.stop()).code).toBe(0);
    expect(alive(bystander)).toBe(true);
  }, 180_000);

  it('a PostgreSQL orphaned by a SIGKILLed Waymark is stopped by the next start, which gets ready', async () => {
    if (!dataDir) throw new Error('runs after the test above, on its data folder');
    const cluster = path.join(dataDir, 'postgres');
    const first = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
    await first.waitUntilReady(60_000);
    first.signal('SIGKILL');
    await first.waitForExit(10_000);
    const orphan = Number(
      readFileSync(path.join(cluster, 'postmaster.pid'), 'utf8').split('\n')[0],
    );
    for (let i = 0; i < 50 && parentOf(orphan) !== 1; i += 1) await sleep(20);
    expect(parentOf(orphan)).toBe(1);

    const second = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
    await second.waitUntilReady(60_000);
    expect(second.stdout()).toContain('stopping an orphaned embedded PostgreSQL');
    expect(alive(orphan)).toBe(false);
    expect((await second.stop()).code).toBe(0);
    expect(await processesNaming(cluster)).toEqual([]);
  }, 180_000);
});
