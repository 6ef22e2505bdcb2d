import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { printedBootstrapKeys, processesNaming, waymarkProcesses } from '../support/process.js';

/**
 * The quick start: no DATABASE_URL, so the service runs its own PostgreSQL in
 * WAYMARK_DATA_DIR, bootstraps an admin key, and on SIGTERM stops the
 * database too. A restart on the same folder finds everything again.
 */

const SHUTDOWN_GRACE_MS = 15_000;

const processes = waymarkProcesses();
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-embedded-'));
});

afterEach(async () => {
  await processes.killAll();
});

afterAll(async () => {
  await processes.killAll();
  // Holds the cluster folder owned by the postgres OS user; root removes it all.
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

function startEmbedded() {
  return processes.start({
    env: { WAYMARK_DATA_DIR: dataDir, SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS) },
  });
}

function getMe(url: string, key?: string): Promise<Response> {
  return fetch(`${url}/v1/me`, {
    headers: key ? { authorization: `Bearer ${key}` } : {},
    signal: AbortSignal.timeout(10_000),
  });
}

describe.sequential('embedded PostgreSQL start', () => {
  it('first start without DATABASE_URL runs embedded PostgreSQL, prints one admin key, and stops everything on SIGTERM', async () => {
    const waymark = await startEmbedded();
    await waymark.waitUntilReady(60_000);

    const anonymous = await getMe(waymark.url);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const problem = (await anonymous.json()) as { code?: unknown; status?: unknown };
    expect(problem).toMatchObject({ status: 401, code: 'missing_api_key' });

    const keyFile = path.join(dataDir, 'admin-key');
    const key = (await readFile(keyFile, 'utf8')).trim();
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);

    const me = await getMe(waymark.url, key);
    expect(me.status).toBe(200);
    expect(await me.json()).toMatchObject({
      tenant: { name: 'operator', isOperator: true },
      apiKey: { scopes: ['admin'] },
    });

    // Printed once, in the banner; never in a (JSON) log line, nor on stderr.
    expect(printedBootstrapKeys(waymark.stdout())).toEqual([key]);
    const logLines = waymark
      .stdout()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.filter((line) => line.includes(key))).toEqual([]);
    expect(waymark.stderr()).not.toContain(key);

    const exit = await waymark.stop('SIGTERM', 60_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(exit.elapsedMs).toBeLessThan(SHUTDOWN_GRACE_MS);
    expect(await processesNaming(dataDir)).toEqual([]);
  }, 120_000);

  it('a restart on the same data dir reuses the data: the saved key still answers and no new key is printed', async () => {
    const keyFile = path.join(dataDir, 'admin-key');
    expect(existsSync(keyFile), 'needs the data dir left by the first start').toBe(true);
    const key = (await readFile(keyFile, 'utf8')).trim();

    const waymark = await startEmbedded();
    await waymark.waitUntilReady(60_000);

    const me = await getMe(waymark.url, key);
    expect(me.status).toBe(200);
    expect(printedBootstrapKeys(waymark.stdout())).toEqual([]);
    expect(waymark.stdout()).not.toContain(key);
    expect((await readFile(keyFile, 'utf8')).trim()).toBe(key);

    const exit = await waymark.stop('SIGTERM', 60_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(await processesNaming(dataDir)).toEqual([]);
  }, 120_000);
});
