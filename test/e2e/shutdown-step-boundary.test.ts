import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer } from '../fakes/provider-server.js';
import type { FakeProviderServer } from '../fakes/provider-types.js';
import { within } from '../support/event-streams.js';
import { waymarkProcesses } from '../support/process.js';
import {
  type Cluster,
  createWorkflow,
  hangingReply,
  startTwoReplicas,
  storedEventsOf,
  workflowOn,
} from '../support/replica-cluster.js';
import { waitFor } from '../support/workflows.js';

/**
 * DESIGN.md, Durability: "SIGTERM: stop accepting, let running steps finish
 * within a grace period, release leases". A step that finishes within the
 * grace is persisted and the workflow handed over at once; the replica
 * shutting down does not start the next step (a model call it would only
 * cut off at the end of the grace, and pay for, while the workflow waits).
 */

const GRACE_MS = 8_000;
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

describe('SIGTERM while a step is running', () => {
  it('the step finishes within the grace: it is persisted, no further step starts on the stopping replica, and the other replica resumes at once', async () => {
    cluster = await startTwoReplicas(processes, provider, {
      WORKFLOW_LEASE_MS: '60000',
      WORKFLOW_LEASE_RENEW_MS: '20000',
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
    });
    const { a, b, key, database } = cluster;
    const turn1 = hangingReply(['Let me ', 'compute.']);
    const turn2 = hangingReply(['Still ', 'working.']);
    provider.enqueue(
      {
        ...turn1.reply,
        toolCalls: [{ id: 'call_mul', name: 'calculator', arguments: { expression: '6 * 7' } }],
      } as typeof turn1.reply,
      turn2.reply,
      { kind: 'reply', chunks: ['It is ', '42.'] },
    );
    const id = await createWorkflow(a, key, {
      input: `What is six times seven? (${Date.now()})`,
      mode: 'simple',
    });
    await within(turn1.started, 20_000, 'turn 1 streaming on A');

    a.signal('SIGTERM');
    await a.waitForStdout(/"shutting down"/);
    // Turn 1 ends well within the grace period.
    turn1.release();
    const exit = await a.waitForExit(30_000);
    turn2.release();

    const ended = await waitFor(
      async () => {
        const workflow = await workflowOn(b, key, id);
        return workflow.status === 'completed' || workflow.status === 'failed'
          ? workflow
          : undefined;
      },
      'the workflow ending on B',
      30_000,
    );
    const events = await storedEventsOf(database.url, id);
    const summary = events.map((e) => `${e.seq} ${e.type}/${e.step ?? '-'}/${e.status}`).join('\n');
    expect(ended.status, summary).toBe('completed');
    // A persisted turn 1 and handed the workflow over; it started no turn 2 of its own.
    expect(
      {
        exitedWithinHalfTheGrace: exit.elapsedMs < GRACE_MS / 2,
        interruptedCalls: events.filter((e) => e.type === 'llm_call' && e.status === 'failed')
          .length,
      },
      `${summary}\nA exited ${exit.elapsedMs} ms after SIGTERM`,
    ).toEqual({ exitedWithinHalfTheGrace: true, interruptedCalls: 0 });
  }, 120_000);
});
