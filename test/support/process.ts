import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort, freePorts } from '../../src/free-ports.js';

export { freePort, freePorts };

/**
 * Runs the built service (`node dist/main.js`) as a child process, the way an
 * operator does, for end-to-end tests over real sockets and real signals.
 *
 * The child gets an explicit environment: a few basics plus what the test
 * names, never the test runner's own environment (which may carry a
 * DATABASE_URL, NODE_OPTIONS from the runner, or anything else that would
 * change what is being tested).
 */

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const mainScript = path.join(repoRoot, 'dist', 'main.js');

/** How a child process ended. */
export interface ExitResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** From the signal sent by `stop` (or from the spawn when none was sent) to the exit. */
  elapsedMs: number;
}

export interface StartOptions {
  /**
   * Variables for the service, over the base environment (PATH, HOME, HOST,
   * PORT, LOG_LEVEL=info). WAYMARK_DATA_DIR is required so that no test ever
   * falls back to the repository's own `.waymark` folder.
   */
  env: Record<string, string>;
  /** TCP port for PORT; a free one when omitted. */
  port?: number;
  /**
   * `node` spawns `node dist/main.js`; `npm-start` spawns the README's
   * `npm start` (without its prestart build, which would rewrite dist/
   * under the other test files), so signals go through npm as they do for
   * a person.
   */
  via?: 'node' | 'npm-start';
}

export interface WaymarkProcess {
  readonly pid: number;
  readonly port: number;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly dataDir: string;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  hasExited(): boolean;
  /** Polls GET /readyz until it answers 200; fails early when the process exits. */
  waitUntilReady(timeoutMs?: number): Promise<void>;
  /** Resolves once `pattern` appears on stdout. */
  waitForStdout(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Resolves when the process has exited and its output is closed. */
  waitForExit(timeoutMs?: number): Promise<ExitResult>;
  /** Sends `signal` (when still running); a later exit's `elapsedMs` counts from the first one. */
  signal(signal: NodeJS.Signals): void;
  /** Sends `signal` and waits for the exit; `elapsedMs` counts from the signal. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<ExitResult>;
}

export interface WaymarkProcesses {
  /**
   * Spawns a process. The spawn happens synchronously when `port` is given,
   * so several calls in a row start their processes at the same moment.
   */
  start(options: StartOptions): Promise<WaymarkProcess>;
  /**
   * Ends every process started here that still runs (SIGTERM, then SIGKILL
   * for it and its descendants), and any process still naming one of their
   * data folders, such as an orphaned embedded PostgreSQL. For afterEach.
   */
  killAll(): Promise<void>;
}

export function waymarkProcesses(): WaymarkProcesses {
  const started: RunningProcess[] = [];
  return {
    async start(options) {
      const port = options.port ?? (await freePort());
      const running = spawnWaymark({ ...options, port });
      started.push(running);
      return running.handle;
    },
    async killAll() {
      const all = started.splice(0);
      await Promise.all(all.map((running) => running.kill()));
      await killProcessesNaming(all.map((running) => running.handle.dataDir));
    },
  };
}

/**
 * Secrets printed as the bootstrap admin key: the lines of stdout that hold
 * nothing but an API key (log lines are JSON and never match).
 */
export function printedBootstrapKeys(stdout: string): string[] {
  return stdout
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => /^wmk_[A-Za-z0-9_-]{43}$/.test(line));
}

/** Pids of live processes whose command line contains `text`, other than this one. */
export async function processesNaming(text: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    let commandLine: string;
    try {
      commandLine = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).replaceAll('\0', ' ');
    } catch {
      continue; // the process ended while we looked
    }
    if (commandLine.includes(text)) found.push(pid);
  }
  return found;
}

interface RunningProcess {
  handle: WaymarkProcess;
  kill(): Promise<void>;
}

function spawnWaymark(options: StartOptions & { port: number }): RunningProcess {
  const dataDir = options.env.WAYMARK_DATA_DIR;
  if (!dataDir) throw new Error('give the service a WAYMARK_DATA_DIR (a fresh temp folder)');
  assertBuildIsCurrent();
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    HOME: process.env.HOME ?? os.tmpdir(),
    HOST: '127.0.0.1',
    PORT: String(options.port),
    LOG_LEVEL: 'info',
    ...options.env,
  };
  const spawnedAt = Date.now();
  const [command, args] =
    options.via === 'npm-start'
      ? ['npm', ['start', '--ignore-scripts', '--silent']]
      : [process.execPath, [mainScript]];
  const child = spawn(command, args, {
    cwd: repoRoot,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.pid === undefined) throw new Error(`could not spawn ${mainScript}`);
  const pid = child.pid;

  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });

  let signalledAt: number | undefined;
  let exitedAt: number | undefined;
  child.once('exit', () => {
    exitedAt = Date.now();
  });
  // 'close' comes after 'exit' once stdout and stderr are drained, so the
  // output is complete when a test reads it.
  const closed = new Promise<ExitResult>((resolve) => {
    child.once('close', (code, signal) => {
      const end = exitedAt ?? Date.now();
      resolve({ code, signal, elapsedMs: end - (signalledAt ?? spawnedAt) });
    });
  });
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;
  const url = `http://127.0.0.1:${options.port}`;
  const describe = () =>
    `pid ${pid} on port ${options.port}\n--- stdout ---\n${tail(stdout)}\n--- stderr ---\n${tail(stderr)}`;

  const sendSignal = (signal: NodeJS.Signals): void => {
    if (hasExited()) return;
    signalledAt ??= Date.now();
    child.kill(signal);
  };

  const waitForExit = async (timeoutMs = 60_000): Promise<ExitResult> => {
    const timer = new AbortController();
    try {
      const result = await Promise.race([
        closed,
        sleep(timeoutMs, undefined, { signal: timer.signal }).catch(() => undefined),
      ]);
      if (!result) throw new Error(`did not exit within ${timeoutMs} ms: ${describe()}`);
      return result;
    } finally {
      timer.abort();
    }
  };

  const handle: WaymarkProcess = {
    pid,
    port: options.port,
    url,
    dataDir,
    stdout: () => stdout,
    stderr: () => stderr,
    hasExited,

    async waitUntilReady(timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      let last = 'no answer yet';
      while (Date.now() < deadline) {
        if (hasExited()) throw new Error(`exited before it was ready: ${describe()}`);
        try {
          const response = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5_000) });
          await response.arrayBuffer();
          if (response.status === 200) return;
          last = `HTTP ${response.status}`;
        } catch (error) {
          last = error instanceof Error ? error.message : String(error);
        }
        await sleep(200);
      }
      throw new Error(`/readyz did not answer 200 within ${timeoutMs} ms (${last}): ${describe()}`);
    },

    async waitForStdout(pattern, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!pattern.test(stdout)) {
        if (hasExited()) throw new Error(`exited before printing ${pattern}: ${describe()}`);
        if (Date.now() > deadline) {
          throw new Error(`${pattern} not printed within ${timeoutMs} ms: ${describe()}`);
        }
        await sleep(50);
      }
    },

    waitForExit,

    signal: sendSignal,

    async stop(signal = 'SIGTERM', timeoutMs = 60_000) {
      sendSignal(signal);
      return waitForExit(timeoutMs);
    },
  };

  return {
    handle,
    async kill() {
      if (hasExited()) return;
      // Politely first: a SIGTERM also stops an embedded PostgreSQL.
      child.kill('SIGTERM');
      if (await exitsWithin(closed, 15_000)) return;
      const descendants = await descendantsOf(pid);
      child.kill('SIGKILL');
      for (const descendant of descendants) killQuietly(descendant, 'SIGKILL');
      await closed;
    },
  };
}

/** Running stale JavaScript would test yesterday's code: insist on a fresh build. */
function assertBuildIsCurrent(): void {
  if (!existsSync(mainScript)) {
    throw new Error(`${mainScript} is missing; run \`npm run build\` before the e2e tests`);
  }
  const built = statSync(mainScript).mtimeMs;
  const newer = newestFile(path.join(repoRoot, 'src'));
  if (newer && newer.mtimeMs > built) {
    throw new Error(
      `${path.relative(repoRoot, newer.file)} changed after the last build; run \`npm run build\``,
    );
  }
}

function newestFile(dir: string): { file: string; mtimeMs: number } | undefined {
  let newest: { file: string; mtimeMs: number } | undefined;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    const candidate = entry.isDirectory()
      ? newestFile(file)
      : { file, mtimeMs: statSync(file).mtimeMs };
    if (candidate && (!newest || candidate.mtimeMs > newest.mtimeMs)) newest = candidate;
  }
  return newest;
}

async function exitsWithin(closed: Promise<unknown>, ms: number): Promise<boolean> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      closed.then(() => true),
      sleep(ms, false, { signal: timer.signal }).catch(() => false),
    ]);
  } finally {
    timer.abort();
  }
}

/** Children, grandchildren... of `pid`, from the parent pids in /proc. */
async function descendantsOf(pid: number): Promise<number[]> {
  const children = new Map<number, number[]>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = await readFile(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    // The parent pid is the second field after the parenthesised command name.
    const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
  }
  const found: number[] = [];
  const queue = [pid];
  for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
    for (const child of children.get(next) ?? []) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

/**
 * Stops what is left naming the given folders: an embedded PostgreSQL
 * orphaned by a killed service, for instance. SIGINT is PostgreSQL's fast
 * shutdown; SIGKILL follows for anything that ignores it.
 */
async function killProcessesNaming(dirs: string[]): Promise<void> {
  const pids = new Set<number>();
  for (const dir of new Set(dirs)) {
    for (const pid of await processesNaming(dir)) pids.add(pid);
  }
  if (pids.size === 0) return;
  for (const pid of pids) killQuietly(pid, 'SIGINT');
  const deadline = Date.now() + 10_000;
  while ([...pids].some(isAlive) && Date.now() < deadline) await sleep(100);
  for (const pid of pids) killQuietly(pid, 'SIGKILL');
}

/** False for a process that is gone or a zombie nobody has reaped yet. */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    // Gone already: exactly what we wanted.
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

function tail(text: string, lines = 40): string {
  return text.split('\n').slice(-lines).join('\n');
}
