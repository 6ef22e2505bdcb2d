import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { within } from '../support/event-streams.js';
import { waymarkProcesses } from '../support/process.js';
import {
  type Cluster,
  createWorkflow,
  hangingReply,
  startTwoReplicas as startReplicas,
  storedEventsOf,
  workflowOn,
} from '../support/replica-cluster.js';
import { waitFor } from '../support/workflows.js';

/**
 * A replica that is slow but alive (its event loop or whole process paused
 * past WORKFLOW_LEASE_MS: a long GC, a VM pause, a SIGSTOP) loses its lease;
 * the other replica takes the workflow over and resumes it. When the first
 * one wakes up, its run must notice that it no longer owns the workflow and
 * write nothing more ("a workflow runs on one replica at a time"). Here the
 * pause is a real SIGSTOP/SIGCONT of the process.
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

describe('a replica paused past its lease while it runs a workflow', () => {
  it('after the other replica took it over, the woken replica writes nothing more: the answer is the new runner’s and every llm_call ends once', async () => {
    cluster = await startTwoReplicas();
    const { a, b, key, database } = cluster;
    const onA = hangingReply(['Stale answer ', 'from A.']);
    const onB = hangingReply(['Fresh answer ', 'from B.']);
    provider.enqueue(onA.reply, onB.reply);
    const id = await createWorkflow(a, key, {
      input: `Who answers? (${Date.now()})`,
      mode: 'simple',
    });
    await within(onA.started, 20_000, 'the model call streaming on A');
    // A's start is written with its first events, a few ms after the call began; paused
    // before that, the workflow would still be queued, and B would run it afresh.
    await waitFor(
      async () =>
        (await storedEventsOf(database.url, id)).some((e) => e.type === 'llm_call') || undefined,
      'A writing its start',
      20_000,
    );

    // A stalls for longer than its lease: B takes the workflow over and calls the model.
    process.kill(a.pid, 'SIGSTOP');
    try {
      await within(onB.started, 30_000, 'B resuming the workflow');
      // A's model call completes while A is paused; A then wakes up.
      onA.release();
      await sleep(300);
    } finally {
      process.kill(a.pid, 'SIGCONT');
    }
    // Leave A time to notice (its lease renewal fails at its next beat, 500 ms).
    await sleep(3_000);
    onB.release();

    const ended = await waitFor(
      async () => {
        const workflow = await workflowOn(b, key, id);
        return workflow.status === 'completed' || workflow.status === 'failed'
          ? workflow
          : undefined;
      },
      'the workflow ending',
      30_000,
    );
    const events = await storedEventsOf(database.url, id);
    const summary = events.map((e) => `${e.seq} ${e.type}/${e.step ?? '-'}/${e.status}`);

    // The runner that holds the lease (B) is the one that answers.
    expect(ended, summary.join('\n')).toMatchObject({
      status: 'completed',
      result: { answer: 'Fresh answer from B.' },
    });
    // Nothing after the takeover comes from the stale run.
    const resumedAt = events.findIndex((e) => e.type === 'resumed');
    expect(resumedAt, summary.join('\n')).toBeGreaterThan(0);
    expect(
      events.slice(resumedAt).filter((e) => JSON.stringify(e.detail).includes('from A')),
      summary.join('\n'),
    ).toEqual([]);
    // Every llm_call that started ends exactly once.
    const starts = events.filter((e) => e.type === 'llm_call' && e.status === 'started').length;
    const ends = events.filter(
      (e) => e.type === 'llm_call' && (e.status === 'completed' || e.status === 'failed'),
    ).length;
    expect(ends, summary.join('\n')).toBe(starts);
  }, 120_000);
});

function startTwoReplicas(): Promise<Cluster> {
  return startReplicas(processes, provider);
}
