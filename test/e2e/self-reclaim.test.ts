import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { within } from '../support/event-streams.js';
import { printedBootstrapKeys, waymarkProcesses } from '../support/process.js';
import {
  createWorkflow,
  hangingReply,
  replicaEnv,
  storedEventsOf,
  workflowOn,
} from '../support/replica-cluster.js';

/**
 * A replica whose lease renewal came late (its event loop blocked, the
 * database slow) while it still runs the workflow: another replica's sweep
 * may take the workflow over, but never its own. Taken over by its own
 * sweep, the workflow got a second run queued behind the one still going,
 * which resumed it once that one had paused it for a question: the paused
 * workflow ran on without its answer.
 *
 * The late renewal is simulated by expiring the lease in the database
 * (WORKFLOW_LEASE_RENEW_MS is long, so the run's own heartbeat does not
 * renew it first); nothing else is touched.
 */

const processes = waymarkProcesses();
let provider: FakeProviderServer;
let database: TestDatabase;
let dataDir: string;

beforeAll(async () => {
  provider = await startFakeProviderServer();
  database = await createTestDatabase();
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-e2e-self-'));
});
afterAll(async () => {
  await processes.killAll();
  await provider?.close();
  await database?.drop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('a replica whose own sweep takes over the workflow it is still running', () => {
  it('the run pauses for a question meanwhile: the workflow stays paused, no second run resumes it and no model is called again', async () => {
    const waymark = await processes.start({
      env: {
        ...replicaEnv(provider, database.url, dataDir),
        WORKFLOW_LEASE_MS: '60000',
        WORKFLOW_LEASE_RENEW_MS: '20000',
      },
    });
    await waymark.waitUntilReady(60_000);
    await waymark.waitForStdout(/^\s*wmk_\S+\s*$/m, 10_000);
    const [key] = printedBootstrapKeys(waymark.stdout());
    if (!key) throw new Error('no key');

    const question = `Which year? (${Date.now()})`;
    const turn1 = hangingReply(['I need ', 'to ask.']);
    provider.enqueue(
      {
        ...turn1.reply,
        toolCalls: [
          {
            id: 'call_ask',
            name: 'ask_user',
            arguments: { question: 'Which year do you mean?', question_type: 'free_text' },
          },
        ],
      } as typeof turn1.reply,
      { kind: 'reply', text: 'A second run answered without the user.' },
      { kind: 'reply', text: 'A second run answered without the user.' },
    );
    const id = await createWorkflow(waymark, key, { input: question, mode: 'simple' });
    await within(turn1.started, 20_000, 'turn 1 streaming');

    // The renewal is late: the lease has expired while the run goes on.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(
        "UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
        [id],
      );
    } finally {
      await client.end();
    }
    // Sweeps every 250 ms meanwhile; none may take over the run still going here.
    await sleep(1_500);
    expect(waymark.stdout()).not.toMatch(/"taking a workflow over"/);

    // The run still going finishes its turn: it asks the user and pauses.
    turn1.release();
    await sleep(4_000);

    const workflow = await workflowOn(waymark, key, id);
    const events = await storedEventsOf(database.url, id);
    const logs = waymark
      .stdout()
      .split('\n')
      .filter((line) => line.includes(id) && !line.includes('request'))
      .map((line) => {
        const entry = JSON.parse(line) as { msg?: string; err?: { message?: string } };
        return `  log: ${entry.msg}${entry.err ? ` (${entry.err.message})` : ''}`;
      });
    const summary = [
      ...events.map((e) => `${e.seq} ${e.type}/${e.step ?? '-'}/${e.status}`),
      ...logs,
    ].join('\n');
    const asked = events.findIndex((e) => e.type === 'clarification_request');
    expect(asked, summary).toBeGreaterThan(0);
    expect(
      {
        status: workflow.status,
        eventsAfterTheQuestion: events.slice(asked + 1).map((e) => `${e.type}/${e.status}`),
        modelCalls: provider.requests.filter((r) =>
          JSON.stringify(r.body.messages).includes(question),
        ).length,
      },
      summary,
    ).toEqual({
      status: 'awaiting_input',
      eventsAfterTheQuestion: ['usage/info'],
      modelCalls: 1,
    });
  }, 120_000);
});
