import { readdirSync, readFileSync } from 'node:fs';

/**
 * Where a benchmark's CPU goes on this machine, by part: this process's
 * threads (the main thread, a load thread, the rest: V8's GC helpers,
 * libuv's pool, the TypeScript loader) and the embedded PostgreSQL's
 * processes. On a saturated 2-core machine the workflows per second are
 * 2 cores divided by the sum of these per workflow, so this says which part
 * to make cheaper, where a wall-clock figure alone moves with the host's
 * noise. Read from Linux's /proc; elsewhere `read()` returns undefined.
 */

/** Linux's USER_HZ: /proc reports CPU time in ticks of 10 ms on every architecture Node runs on. */
const TICKS_PER_SECOND = 100;

export interface CpuParts {
  mainThread: number;
  loadThread: number;
  otherThreads: number;
  postgres: number;
}

export interface MachineCpu {
  /** CPU milliseconds so far, by part; undefined off Linux. */
  read(): CpuParts | undefined;
}

/** The calling thread's Linux task id (its tid), or undefined off Linux. */
export function currentTaskId(): number | undefined {
  return readStat('/proc/thread-self/stat')?.pid;
}

/**
 * `loadTaskId` is the load thread's tid (undefined: no load thread here);
 * PostgreSQL is every process descended from a `postgres` child of this one.
 */
export function machineCpu(options: { loadTaskId: number | undefined }): MachineCpu {
  return {
    read() {
      const threads = readTicksOf(`/proc/${process.pid}/task`);
      if (!threads) return undefined;
      const parts: CpuParts = { mainThread: 0, loadThread: 0, otherThreads: 0, postgres: 0 };
      for (const [tid, ticks] of threads) {
        if (tid === process.pid) parts.mainThread += ticks;
        else if (tid === options.loadTaskId) parts.loadThread += ticks;
        else parts.otherThreads += ticks;
      }
      parts.postgres = postgresTicks();
      for (const key of Object.keys(parts) as (keyof CpuParts)[]) {
        parts[key] = (parts[key] * 1000) / TICKS_PER_SECOND;
      }
      return parts;
    },
  };
}

export function cpuBetween(before: CpuParts, after: CpuParts): CpuParts {
  return {
    mainThread: after.mainThread - before.mainThread,
    loadThread: after.loadThread - before.loadThread,
    otherThreads: after.otherThreads - before.otherThreads,
    postgres: after.postgres - before.postgres,
  };
}

interface ProcessStat {
  pid: number;
  ppid: number;
  comm: string;
  ticks: number;
}

/** utime + stime of each task under `dir` (a /proc/<pid>/task folder), by tid. */
function readTicksOf(dir: string): Map<number, number> | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined; // no /proc: not Linux
  }
  const ticks = new Map<number, number>();
  for (const name of names) {
    const stat = readStat(`${dir}/${name}/stat`);
    if (stat) ticks.set(stat.pid, stat.ticks);
  }
  return ticks;
}

function postgresTicks(): number {
  const all: ProcessStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readStat(`/proc/${name}/stat`);
    if (stat) all.push(stat);
  }
  const ours = new Set(
    all.filter((one) => one.ppid === process.pid && one.comm === 'postgres').map((one) => one.pid),
  );
  let total = 0;
  // The postmaster's children (backends, WAL writer...) are one level below it.
  for (const one of all) if (ours.has(one.pid) || ours.has(one.ppid)) total += one.ticks;
  return total;
}

/** Fields of /proc/<pid>/stat; `comm` is in parentheses and may hold spaces. */
function readStat(file: string): ProcessStat | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined; // the task ended between the listing and the read, or not Linux
  }
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  const fields = text.slice(close + 2).split(' ');
  // After comm: state(0) ppid(1) ... utime(11) stime(12).
  return {
    pid: Number(text.slice(0, open - 1)),
    comm: text.slice(open + 1, close),
    ppid: Number(fields[1]),
    ticks: Number(fields[11]) + Number(fields[12]),
  };
}
