import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { type FileOwner, isSecretFileLeftover, writeSecretFile } from '../secret-file.js';

/**
 * The embedded PostgreSQL's cluster in the data folder: `postgres/`, made
 * by initdb, and `postgres-password`, its superuser's password.
 */

const execFileAsync = promisify(execFile);

export const SUPERUSER = 'postgres';
const PASSWORD_FILE = 'postgres-password';
/** A cluster being initialised, renamed to `postgres/` once initdb has ended well. */
const STAGING_PREFIX = 'postgres.initdb-';
/** Password files of versions that gave initdb a copy of the password. */
const OLD_PASSWORD_COPY_PREFIX = '.initdb-pw-';

export interface PrepareClusterOptions {
  initdb: string;
  dataDir: string;
  clusterDir: string;
  /** The OS user the server runs as, when not this process's (see postgresOsUser). */
  osUser: FileOwner | undefined;
  log: Logger;
}

/**
 * PostgreSQL refuses to run as root, so as root the server runs as the
 * `postgres` OS user, created (as a system user) when missing.
 */
export async function postgresOsUser(): Promise<FileOwner | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const lookup = async (): Promise<FileOwner> => {
    const [uid, gid] = await Promise.all([
      execFileAsync('id', ['-u', SUPERUSER]),
      execFileAsync('id', ['-g', SUPERUSER]),
    ]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await lookup();
  } catch {
    await execFileAsync('useradd', ['--system', '--user-group', '--no-create-home', SUPERUSER]);
    return lookup();
  }
}

/**
 * Returns the superuser's password of the cluster in `clusterDir`,
 * initialising the cluster first when there is none.
 *
 * A start can be killed anywhere (SIGKILL, the OOM killer, a container's
 * stop timeout), initdb with it or not, so `postgres/` only ever holds a
 * whole cluster whose password is saved: the password file is written
 * (atomically) before initdb, which reads the password from it, and initdb
 * fills a staging folder renamed to `postgres/` once it has ended well. A
 * later start removes what an unfinished one left and initialises anew.
 */
export async function prepareCluster(options: PrepareClusterOptions): Promise<string> {
  const { dataDir, clusterDir, osUser, log } = options;
  const passwordFile = path.join(dataDir, PASSWORD_FILE);
  await removeLeftovers(dataDir, log);
  if (existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    if (osUser) {
      await chown(clusterDir, osUser.uid, osUser.gid);
      await assertWritableBy(clusterDir, osUser);
    }
    return readPassword(passwordFile, clusterDir);
  }
  if (existsSync(clusterDir) && (await readdir(clusterDir)).length > 0) {
    throw new Error(
      `${clusterDir} is not empty but holds no PostgreSQL cluster; move it away or choose another WAYMARK_DATA_DIR`,
    );
  }
  const password = randomBytes(24).toString('hex');
  // Owned by the server's OS user, who runs initdb; that user owns the
  // cluster already, so reading its superuser's password gives it nothing.
  await writeSecretFile(passwordFile, `${password}\n`, osUser);
  const staging = path.join(dataDir, `${STAGING_PREFIX}${randomBytes(6).toString('hex')}`);
  await mkdir(staging, { mode: 0o700 });
  if (osUser) {
    await chown(staging, osUser.uid, osUser.gid);
    await assertWritableBy(staging, osUser);
  }
  log.info({ clusterDir }, 'initialising embedded PostgreSQL cluster');
  await execFileAsync(
    options.initdb,
    [
      `--pgdata=${staging}`,
      `--username=${SUPERUSER}`,
      `--pwfile=${passwordFile}`,
      '--auth=scram-sha-256',
      '--encoding=UTF8',
      '--no-locale',
    ],
    { ...(osUser ?? {}), env: { ...process.env, LC_ALL: 'C' } },
  );
  // Replaces the empty folder an earlier version created ahead of initdb.
  await rename(staging, clusterDir);
  return password;
}

/**
 * What a start killed during the cluster's initialisation leaves: its
 * staging folder, a password file's temporary copy, and (from earlier
 * versions) initdb's own copy of the password, in plain text. An initdb
 * orphaned by the kill may still be filling its staging folder; failing to
 * remove one is logged, and never stops the start.
 */
async function removeLeftovers(dataDir: string, log: Logger): Promise<void> {
  for (const name of await readdir(dataDir)) {
    const unfinished = name.startsWith(STAGING_PREFIX);
    if (
      !unfinished &&
      !name.startsWith(OLD_PASSWORD_COPY_PREFIX) &&
      !isSecretFileLeftover(name, PASSWORD_FILE)
    ) {
      continue;
    }
    const leftover = path.join(dataDir, name);
    if (unfinished) log.warn({ leftover }, 'removing a cluster an earlier start did not finish');
    try {
      await rm(leftover, { recursive: true, force: true, maxRetries: 3 });
    } catch (error) {
      log.warn({ err: error, leftover }, 'could not remove what an earlier start left');
    }
  }
}

async function readPassword(passwordFile: string, clusterDir: string): Promise<string> {
  try {
    return (await readFile(passwordFile, 'utf8')).trim();
  } catch (error) {
    throw new Error(
      `${clusterDir} holds a PostgreSQL cluster but its password file ${passwordFile} cannot be read ` +
        "(an earlier version's first start, killed during initdb, left it so); " +
        'restore the file, or move the cluster away to start afresh',
      { cause: error },
    );
  }
}

async function assertWritableBy(dir: string, user: FileOwner): Promise<void> {
  try {
    await execFileAsync('test', ['-w', dir, '-a', '-x', dir], { uid: user.uid, gid: user.gid });
  } catch {
    throw new Error(
      `the OS user ${SUPERUSER} cannot write ${dir} (a parent folder may deny it); ` +
        'set WAYMARK_DATA_DIR to a folder it can reach, e.g. /var/lib/waymark',
    );
  }
}
