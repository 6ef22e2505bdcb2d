import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { waymarkProcesses } from '../support/process.js';
import {
  type Cluster,
  createWorkflow,
  startTwoReplicas,
  storedEventsOf,
  workflowOn,
} from '../support/replica-cluster.js';
import { waitFor } from '../support/workflows.js';

/**
 * The usage ledger queues its rows and writes them in batches; a replica
 * killed with rows still queued loses them. Before, a run's events (the
 * `llm_call` that reports a call's usage, the `usage` and `workflow_end`
 * that add it to the workflow) did not wait for the ledger: a replica
 * killed within the ~250 ms after a workflow's end left a workflow that
 * counted calls the ledger had no row of (seen in a chaos run of SIGKILLs,
 * one or two workflows in thirty). Here the ledger's write is held up by a
 * lock on its table, so the kill lands in that window every time: the row
 * is still queued, or its INSERT waits for the lock, and its backend is
 * ended with the replica (PostgreSQL, waiting for the lock, would notice
 * the client gone only after committing the row).
 */

const processes = waymarkProcesses();
let provider: FakeProviderServer;
let cluster: Cluster | undefined;

beforeAll(async () => {
  provider = await startFakeProviderServer();
});
afterEach(async () => {
  await cluster?.cleanup();
  cluster = undefined;
});
afterAll(async () => {
  await processes.killAll();
  await provider?.close();
});

async function ledgerOf(databaseUrl: string, workflowId: string) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ calls: number; input: number; output: number }>(
      `SELECT count(*)::int AS calls, coalesce(sum(input_tokens), 0)::int AS input,
              coalesce(sum(output_tokens), 0)::int AS output
       FROM llm_calls WHERE workflow_id = $1`,
      [workflowId],
    );
    return rows[0];
  } finally {
    await client.end();
  }
}

describe('a replica killed while the usage ledger has rows queued', () => {
  it('SIGKILL after the model call, its ledger row not yet written: the workflow, finished by the other replica, counts no call the ledger lacks', async () => {
    cluster = await startTwoReplicas(processes, provider);
    const { a, b, key, database } = cluster;
    const usage = { input: 120, output: 7 };
    provider.enqueue(
      { kind: 'reply', text: 'Answered on A.', usage },
      { kind: 'reply', text: 'Answered on B.', usage },
    );
    // The ledger's INSERT waits behind this lock; the workflow's own writes do not.
    const lock = new pg.Client({ connectionString: database.url });
    await lock.connect();
    await lock.query('BEGIN');
    await lock.query('LOCK TABLE llm_calls IN SHARE MODE');
    let id: string;
    try {
      const requested = provider.nextRequest();
      id = await createWorkflow(a, key, { input: `Count me once (${Date.now()})`, mode: 'simple' });
      await requested;
      // Before the fix it completes at once; after it, it waits for the ledger.
      const deadline = Date.now() + 3_000;
      while (Date.now() < deadline && (await workflowOn(a, key, id)).status !== 'completed') {
        await sleep(50);
      }
      a.signal('SIGKILL');
      await a.waitForExit(30_000);
      // Sent already (a flush came before the kill), the INSERT dies with the replica too.
      await lock.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'
           AND strpos(query, 'llm_calls') > 0`,
      );
    } finally {
      await lock.query('ROLLBACK');
      await lock.end();
    }

    const ended = await waitFor(
      async () => {
        const workflow = await workflowOn(b, key, id);
        return workflow.status === 'completed' ? workflow : undefined;
      },
      'the workflow completing',
      30_000,
    );
    const counted = (ended.usage ?? {}) as { inputTokens?: number; outputTokens?: number };
    const ledger = await ledgerOf(database.url, id);
    const calls = (await storedEventsOf(database.url, id)).filter(
      (event) => event.type === 'llm_call' && event.status === 'completed',
    );
    expect({
      inputTokens: counted.inputTokens,
      outputTokens: counted.outputTokens,
      callsCounted: calls.length,
    }).toEqual({
      inputTokens: ledger?.input,
      outputTokens: ledger?.output,
      callsCounted: ledger?.calls,
    });
  }, 120_000);
});
