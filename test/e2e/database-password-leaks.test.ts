import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort, waymarkProcesses } from '../support/process.js';

/**
 * The database password stays out of what a start that fails writes: the
 * service's log (at trace) and its standard error. The service's other
 * secrets: test/integration/secret-leaks.test.ts and
 * test/integration/provider-key-leaks.test.ts.
 */

describe('a start whose database refuses it', () => {
  const processes = waymarkProcesses();
  let dataDir: string;
  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-secret-leaks-'));
  });
  afterEach(() => processes.killAll());
  afterAll(async () => {
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('nobody listening, or a user it does not know: the exit logs why, at trace, without the password', async () => {
    const password = 'db-password-leak-check-6666';
    const server = new URL(inject('testDatabaseAdminUrl'));
    const unknownUser = new URL(server);
    unknownUser.username = 'waymark_no_such_user';
    unknownUser.password = password;
    unknownUser.pathname = '/postgres';
    const nobody = new URL(unknownUser);
    nobody.host = `127.0.0.1:${await freePort()}`;
    for (const url of [nobody, unknownUser]) {
      const waymark = await processes.start({
        env: { WAYMARK_DATA_DIR: dataDir, LOG_LEVEL: 'trace', DATABASE_URL: url.href },
      });
      const exit = await waymark.waitForExit(30_000);
      expect(exit.code, waymark.stderr()).toBe(1);
      expect(waymark.stdout()).toContain('waymark failed to start');
      expect(waymark.stdout() + waymark.stderr()).not.toContain(password);
    }
  }, 60_000);

  it('PostgreSQL’s refusal quoting the password (the user named as the password is): the exit logs the refusal, the value replaced', async () => {
    const password = 'db-password-leak-check-7777';
    const url = new URL(inject('testDatabaseAdminUrl'));
    // The server names the user it refuses; a password it never quotes.
    url.username = password;
    url.password = password;
    url.pathname = '/postgres';
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, LOG_LEVEL: 'trace', DATABASE_URL: url.href },
    });
    const exit = await waymark.waitForExit(30_000);
    expect(exit.code, waymark.stderr()).toBe(1);
    const line = waymark
      .stdout()
      .split('\n')
      .find((text) => text.includes('waymark failed to start'));
    // "password authentication failed for user …", or "role … does not exist" on a server that trusts.
    expect(line).toMatch(/(user|role) \\"\[redacted\]\\"/);
    expect(waymark.stdout() + waymark.stderr()).not.toContain(password);
  }, 60_000);
});
