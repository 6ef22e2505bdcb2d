import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { printedBootstrapKeys, waymarkProcesses } from '../support/process.js';
import { hangingReply, replicaEnv } from '../support/replica-cluster.js';

/**
 * SIGTERM closes the event streams open at that moment with a `retry:` hint
 * (the eventStreams plugin's preClose hook). A stream request already in
 * flight then (here `POST /v1/workflows` with `Accept: text/event-stream`,
 * whose insert is still waiting on the database) opens its stream after
 * that hook ran: it must be ended promptly too, so that its client moves to
 * another replica and the process is not held for the whole grace period.
 * The insert is held back by an uncommitted row with the same
 * Idempotency-Key in the test's own transaction.
 */

const GRACE_MS = 8_000;
const processes = waymarkProcesses();
let provider: FakeProviderServer;
let database: TestDatabase;
let dataDir: string;

beforeAll(async () => {
  provider = await startFakeProviderServer();
  database = await createTestDatabase();
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-late-'));
});
afterAll(async () => {
  await processes.killAll();
  await provider?.close();
  await database?.drop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('an event stream that opens while the replica is shutting down', () => {
  it('a create-and-stream request in flight at SIGTERM: its stream is ended (not left open until the grace period forces it)', async () => {
    const waymark = await processes.start({
      env: {
        ...replicaEnv(provider, database.url, dataDir),
        SHUTDOWN_GRACE_MS: String(GRACE_MS),
      },
    });
    await waymark.waitUntilReady(60_000);
    await waymark.waitForStdout(/^\s*wmk_\S+\s*$/m, 10_000);
    const [key] = printedBootstrapKeys(waymark.stdout());
    if (!key) throw new Error('no key');
    const me = (await (
      await fetch(`${waymark.url}/v1/me`, { headers: { authorization: `Bearer ${key}` } })
    ).json()) as { tenant: { id: string } };
    // A model call that lasts: the workflow keeps running.
    const hanging = hangingReply(['Still ', 'thinking.']);
    provider.enqueue(hanging.reply);

    const blocker = new pg.Client({ connectionString: database.url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO workflows (id, tenant_id, status, mode, model, input, idempotency_key, finished_at)
         VALUES (gen_random_uuid(), $1, 'completed', 'simple', 'gpt', 'blocker', 'late-stream', now())`,
        [me.tenant.id],
      );
      const started = performance.now();
      let headersAt: number | undefined;
      let endedAt: number | undefined;
      let body = '';
      const request = http.request(`${waymark.url}/v1/workflows`, {
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          accept: 'text/event-stream',
          'idempotency-key': 'late-stream',
        },
      });
      const ended = new Promise<void>((resolve) => {
        request.once('response', (response) => {
          headersAt = performance.now();
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => {
            body += chunk;
          });
          response.once('close', () => {
            endedAt = performance.now();
            resolve();
          });
        });
        request.once('error', () => {
          endedAt ??= performance.now();
          resolve();
        });
      });
      request.end(JSON.stringify({ input: `Late stream (${Date.now()})`, mode: 'simple' }));

      // The create's insert waits on the unique index.
      const deadline = Date.now() + 20_000;
      for (;;) {
        const { rows } = await blocker.query<{ n: string }>(
          "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        );
        if (Number(rows[0]?.n) > 0) break;
        if (Date.now() > deadline) throw new Error('the create never waited');
        await sleep(50);
      }
      waymark.signal('SIGTERM');
      await waymark.waitForStdout(/"shutting down"/);
      await sleep(300);
      await blocker.query('ROLLBACK');

      await Promise.race([ended, sleep(GRACE_MS + 10_000)]);
      hanging.release();
      const exit = await waymark.waitForExit(30_000);
      const openForMs =
        headersAt !== undefined && endedAt !== undefined ? Math.round(endedAt - headersAt) : -1;
      const stoppedLine = waymark
        .stdout()
        .split('\n')
        .find((line) => line.includes('"waymark stopped"'));
      expect(exit.code).toBe(0);
      expect(headersAt, 'the stream opened').toBeDefined();
      expect(
        { openForMs: openForMs < 3_000 ? 'ended promptly' : `open ${openForMs} ms`, stoppedLine },
        `stream body:\n${body}\n(started ${Math.round(performance.now() - started)} ms ago)`,
      ).toEqual({
        openForMs: 'ended promptly',
        stoppedLine: expect.stringContaining('"forced":false'),
      });
    } finally {
      await blocker.query('ROLLBACK').catch(() => undefined);
      await blocker.end();
    }
  }, 120_000);
});
