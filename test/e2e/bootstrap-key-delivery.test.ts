import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import {
  freePort,
  printedBootstrapKeys,
  type WaymarkProcess,
  waymarkProcesses,
} from '../support/process.js';

/**
 * The first start hands the operator's admin key over (saved in
 * WAYMARK_DATA_DIR/admin-key, mode 0600, and printed) before the bootstrap
 * commits, so a first start that fails after it (the port in use, the
 * LISTEN database out of reach) still leaves the key, and the next start,
 * which finds the tenant and creates no key, serves it.
 */

const processes = waymarkProcesses();
const dirs: string[] = [];
afterEach(async () => processes.killAll());
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** The key the failed first start left: printed once, saved 0600, and working on the next start. */
async function expectKeyHandedOver(first: WaymarkProcess, next: WaymarkProcess): Promise<void> {
  const keyFile = path.join(first.dataDir, 'admin-key');
  const saved = (await readFile(keyFile, 'utf8')).trim();
  expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
  expect(printedBootstrapKeys(first.stdout())).toEqual([saved]);
  expect(printedBootstrapKeys(next.stdout())).toEqual([]);
  const me = await fetch(`${next.url}/v1/me`, {
    headers: { authorization: `Bearer ${saved}` },
    signal: AbortSignal.timeout(10_000),
  });
  expect(me.status).toBe(200);
  expect(await me.json()).toMatchObject({ tenant: { name: 'operator', isOperator: true } });
}

describe('the first admin key is handed over even when the first start fails after creating it', () => {
  it('a first start on a port in use exits non-zero saying so; its key works on the next start', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-port-in-use-'));
    dirs.push(dataDir);
    const port = await freePort();
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    let first: WaymarkProcess;
    try {
      first = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir }, port });
      const exit = await first.waitForExit(60_000);
      expect(exit.code).not.toBe(0);
      expect(first.stdout() + first.stderr()).toMatch(/EADDRINUSE|in use/i);
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }

    const second = await processes.start({ env: { WAYMARK_DATA_DIR: dataDir } });
    await second.waitUntilReady(60_000);
    await expectKeyHandedOver(first, second);
    expect((await second.stop()).code).toBe(0);
  }, 180_000);

  it('a first start whose DATABASE_LISTEN_URL is out of reach exits non-zero; its key works on the next start', async () => {
    const database = await createTestDatabase();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-listen-unreachable-'));
    dirs.push(dataDir);
    try {
      const first = await processes.start({
        env: {
          WAYMARK_DATA_DIR: dataDir,
          DATABASE_URL: database.url,
          DATABASE_LISTEN_URL: 'postgres://nobody:x@127.0.0.1:1/none',
        },
      });
      expect((await first.waitForExit(60_000)).code).not.toBe(0);
      const second = await processes.start({
        env: { WAYMARK_DATA_DIR: dataDir, DATABASE_URL: database.url },
      });
      await second.waitUntilReady(60_000);
      await expectKeyHandedOver(first, second);
      expect((await second.stop()).code).toBe(0);
    } finally {
      await processes.killAll();
      await database.drop();
    }
  }, 180_000);
});
