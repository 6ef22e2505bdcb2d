import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processesNaming, waymarkProcesses } from '../support/process.js';

/**
 * The second signal. `npm start` stopped with Ctrl-C delivers SIGINT to the
 * service twice: the terminal signals the whole foreground process group
 * (npm and the node process it exec'd) and npm forwards the SIGINT it got
 * to its child (@npmcli/run-script signal-manager). A person pressing
 * Ctrl-C again, or a supervisor repeating SIGTERM, does the same. The
 * second signal must not end the drain: left to Node's default action, it
 * killed the process on the spot, without closing the pool, handing leases
 * over or stopping its embedded PostgreSQL.
 *
 * (With npm in the loop the two SIGINTs race; `kill -INT -<pgid>` on an
 * `npm start` left the embedded PostgreSQL running in 2 runs out of 3 here.
 * This test sends the second one once the drain has begun, so it is
 * deterministic.)
 */

const processes = waymarkProcesses();
let dataDir: string | undefined;

afterEach(async () => processes.killAll());
afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('a second SIGINT while the service drains', () => {
  it('the in-flight request is still answered, the service says "waymark stopped" and leaves no PostgreSQL behind', async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-ctrlc-'));
    const waymark = await processes.start({
      env: { WAYMARK_DATA_DIR: dataDir, SHUTDOWN_GRACE_MS: '15000' },
    });
    await waymark.waitUntilReady(60_000);
    const key = (await readFile(path.join(dataDir, 'admin-key'), 'utf8')).trim();

    // A request in flight (a slow upload) keeps the drain going.
    const body = Buffer.from(JSON.stringify({ name: 'created while draining' }));
    const half = Math.floor(body.length / 2);
    const upload = http.request(`${waymark.url}/v1/tenants`, {
      method: 'POST',
      agent: false,
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        'content-length': String(body.length),
      },
    });
    const answered = new Promise<number | string>((resolve) => {
      upload.once('error', (error) => resolve(error.message));
      upload.once('response', (response) => {
        response.resume();
        response.once('end', () => resolve(response.statusCode ?? 0));
      });
    });
    upload.write(body.subarray(0, half));
    await waymark.waitForStdout(/"url":"\/v1\/tenants".*"incoming request"/);

    waymark.signal('SIGINT');
    await waymark.waitForStdout(/"shutting down"/);
    // Ctrl-C's second copy (npm's forward), or Ctrl-C pressed again.
    waymark.signal('SIGINT');
    await sleep(500);
    upload.end(body.subarray(half));
    const status = await Promise.race([answered, sleep(20_000, 'no answer')]);
    const exit = await waymark.waitForExit(30_000);
    let left = await processesNaming(dataDir);
    for (let i = 0; i < 50 && left.length > 0; i++) {
      await sleep(200);
      left = await processesNaming(dataDir);
    }
    expect({
      inFlightRequest: status,
      exit: { code: exit.code, signal: exit.signal },
      stopped: waymark.stdout().includes('"msg":"waymark stopped"'),
      postgresLeftRunning: left.length,
    }).toEqual({
      inFlightRequest: 201,
      exit: { code: 0, signal: null },
      stopped: true,
      postgresLeftRunning: 0,
    });
  }, 120_000);
});
