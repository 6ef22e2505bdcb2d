import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { printedBootstrapKeys, waymarkProcesses } from '../support/process.js';

/**
 * SIGTERM drains: the listener closes at once, a request already in flight
 * still gets its answer, then the process exits 0. With no slow route yet,
 * the in-flight request is a slow upload: the client sends the headers and
 * half the body, and the rest only after the signal.
 */

const SHUTDOWN_GRACE_MS = 30_000;

const processes = waymarkProcesses();
let database: TestDatabase | undefined;
let dataDir: string;

beforeAll(async () => {
  database = await createTestDatabase();
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-shutdown-'));
});

afterEach(async () => {
  await processes.killAll();
});

afterAll(async () => {
  await processes.killAll();
  await database?.drop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: string;
}

/** The JSON log line with message `msg`. */
function logLine(stdout: string, msg: string): Record<string, unknown> | undefined {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((entry) => entry.msg === msg);
}

/** How a brand-new connection fares: refused, or an HTTP status. */
async function probeNewConnection(url: string): Promise<'refused' | number> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${url}/healthz`, { agent: false, timeout: 5_000 }, (response) => {
      response.resume();
      response.once('end', () => resolve(response.statusCode ?? 0));
    });
    request.once('timeout', () => request.destroy(new Error('probe timed out')));
    request.once('error', (error: NodeJS.ErrnoException) => {
      // A connection caught in the backlog as the listener closes is reset.
      if (error.code === 'ECONNREFUSED' || error.code === 'ECONNRESET') resolve('refused');
      else reject(error);
    });
  });
}

describe('graceful shutdown', () => {
  it('on SIGTERM an in-flight request completes, new connections are refused or get 503, and the process exits 0', async () => {
    if (!database) throw new Error('the test database was not created');
    const waymark = await processes.start({
      env: {
        DATABASE_URL: database.url,
        WAYMARK_DATA_DIR: dataDir,
        SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS),
      },
    });
    await waymark.waitUntilReady(60_000);
    // Ready comes after the banner was written; its bytes may still be in the pipe.
    await waymark.waitForStdout(/^\s*wmk_\S+\s*$/m);
    const [key] = printedBootstrapKeys(waymark.stdout());
    if (!key) throw new Error('no bootstrap key was printed');

    const body = Buffer.from(JSON.stringify({ name: 'tenant created while draining' }));
    const half = Math.floor(body.length / 2);
    const agent = new http.Agent({ keepAlive: true });
    const upload = http.request(`${waymark.url}/v1/tenants`, {
      method: 'POST',
      agent,
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        'content-length': String(body.length),
      },
    });
    const answered = new Promise<Answer>((resolve, reject) => {
      upload.once('error', reject);
      upload.once('response', (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.once('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
        response.once('error', reject);
      });
    });
    try {
      upload.write(body.subarray(0, half));
      await waymark.waitForStdout(/"url":"\/v1\/tenants".*"incoming request"/);

      waymark.signal('SIGTERM');
      await waymark.waitForStdout(/"shutting down"/);
      let probe = await probeNewConnection(waymark.url);
      for (let attempt = 0; probe === 200 && attempt < 100; attempt++) {
        await sleep(100);
        probe = await probeNewConnection(waymark.url);
      }
      expect(probe === 'refused' || probe === 503, `new connection got ${probe}`).toBe(true);
      expect(waymark.hasExited(), 'the process waits for the in-flight request').toBe(false);

      upload.end(body.subarray(half));
      const answer = await answered;
      expect(answer.status).toBe(201);
      expect(JSON.parse(answer.body)).toMatchObject({
        tenant: { name: 'tenant created while draining' },
      });

      // The client keeps its connection alive, as a load balancer does: the
      // process must still exit once the request is answered, not when the
      // grace period runs out and it closes what is left by force.
      const exit = await waymark.waitForExit(SHUTDOWN_GRACE_MS + 30_000);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.elapsedMs).toBeLessThan(SHUTDOWN_GRACE_MS);
      expect(logLine(waymark.stdout(), 'waymark stopped')).toMatchObject({ forced: false });
    } finally {
      upload.destroy();
      agent.destroy();
    }

    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT name FROM tenants WHERE name = $1', [
        'tenant created while draining',
      ]);
      expect(rows).toHaveLength(1);
    } finally {
      await client.end();
    }
  }, 120_000);
});
