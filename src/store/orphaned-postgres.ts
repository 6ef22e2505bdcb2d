import { existsSync } from 'node:fs';
import { readFile, readlink, realpath, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';

/**
 * What the pid in a cluster's `postmaster.pid` is now: the cluster's own
 * server, another process (the file is stale), or a process we cannot
 * inspect (no /proc, or not ours to look into).
 */
type LockHolder = 'this_cluster' | 'other_process' | 'unknown';

/**
 * A Waymark killed with SIGKILL leaves its PostgreSQL running, re-parented
 * to init. Such an orphan holds the cluster's lock file, so it is stopped
 * before starting anew. A server whose parent is alive belongs to another
 * running process and is left alone (PostgreSQL then refuses to start).
 *
 * The lock file outlives a crash or a reboot, and by then its pid may be any
 * process's, and every daemon's parent is init too. So only a process shown to be
 * this cluster's server is signalled; a live process shown to be another is
 * left alone and the stale file removed, as PostgreSQL removes one whose pid
 * is dead; a process that cannot be inspected (not Linux, another user's) is
 * left to PostgreSQL's own check of the file.
 */
export async function stopOrphanedServer(clusterDir: string, log: Logger): Promise<void> {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return;
  const holder = await lockHolder(pid, clusterDir);
  if (holder === 'other_process') {
    log.warn(
      { pid },
      'postmaster.pid is stale (its pid is now another process); removing the file',
    );
    await rm(pidFile, { force: true });
    return;
  }
  if (holder === 'unknown' || (await parentPid(pid)) !== 1) return;
  log.warn({ pid }, 'stopping an orphaned embedded PostgreSQL left by an earlier run');
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 30_000;
  while (isAlive(pid) && Date.now() < deadline) await sleep(100);
}

/**
 * The cluster's server runs the `postgres` program, as Waymark starts it,
 * and works in the cluster's folder (the postmaster changes into its data
 * folder), whatever path it was started with.
 */
async function lockHolder(pid: number, clusterDir: string): Promise<LockHolder> {
  let program: string;
  try {
    program = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0')[0] ?? '';
  } catch {
    return 'unknown';
  }
  if (path.basename(program) !== 'postgres') return 'other_process';
  let workingFolder: string;
  try {
    workingFolder = await readlink(`/proc/${pid}/cwd`);
  } catch {
    return 'unknown';
  }
  return workingFolder === (await realpath(clusterDir)) ? 'this_cluster' : 'other_process';
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function parentPid(pid: number): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Field 4 follows the command name, which is parenthesised and may hold spaces.
    const afterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(afterName[1]);
  } catch {
    return undefined;
  }
}
