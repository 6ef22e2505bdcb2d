import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowEvent } from '../../src/workflows/types.js';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  openStream,
  operatorTenant,
  seededRandom,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * The replay property: whatever the moment a client connects, loses its
 * connection (often mid-frame) or reconnects, and however many emitters
 * write concurrently, it receives every persisted event exactly once, in
 * order, ending at workflow_end. Everything random comes from one seed
 * (REPLAY_SEED to replay a failing run); what varies between runs is
 * only the timing.
 */

const SEED = Number(process.env.REPLAY_SEED ?? 20_261_130);
const WORKFLOWS = 20;

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({
    SSE_RETRY_MS: '10',
    SSE_HEARTBEAT_MS: '1000',
    DATABASE_POOL_MAX: '20',
  });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

type ClientMode =
  /** One EventSource; its connections are cut and it reconnects by itself with Last-Event-ID. */
  | 'reconnecting'
  /** Closes its EventSource at chosen points and opens a new one with the last id (header or ?after=). */
  | 'reopening'
  /** Connects once the workflow has ended: replay only, with cuts too. */
  | 'late';

interface Plan {
  events: number;
  /** Events of each concurrent emitter, between workflow_start and workflow_end. */
  shares: number[];
  /** Pause after each emit, per emitter. */
  pauses: number[][];
  mode: ClientMode;
  /** Byte counts after which successive connections are cut. */
  cuts: number[];
  /** For `reopening`: events received before each deliberate close. */
  reopenAfter: number[];
}

function makePlans(): Plan[] {
  const random = seededRandom(SEED);
  const int = (min: number, max: number) => min + Math.floor(random() * (max - min + 1));
  const modes: ClientMode[] = ['reconnecting', 'reopening', 'late'];
  return Array.from({ length: WORKFLOWS }, (_, index) => {
    const events = int(30, 60);
    const emitters = int(2, 4);
    const shares = Array.from({ length: emitters }, () => 0);
    for (let i = 0; i < events - 2; i++) shares[i % emitters] = (shares[i % emitters] ?? 0) + 1;
    return {
      events,
      shares,
      pauses: shares.map((count) =>
        Array.from({ length: count }, () => (random() < 0.5 ? 0 : int(1, 8))),
      ),
      mode: modes[index % modes.length] as ClientMode,
      // Past the 11-byte `retry: 10` frame, so reconnects wait 10 ms, not the default 3 s.
      cuts: Array.from({ length: int(1, 5) }, () => int(11, 2500)),
      reopenAfter: Array.from({ length: int(1, 3) }, () => int(1, 12)),
    };
  });
}

function cutter(cuts: number[]): () => number | undefined {
  let next = 0;
  return () => cuts[next++];
}

async function emit(workflowId: string, plan: Plan): Promise<void> {
  const lead = trackerOn(testApp, { tenantId, workflowId });
  await lead.begin();
  await Promise.all(
    plan.shares.map(async (count, emitter) => {
      const tracker = trackerOn(testApp, { tenantId, workflowId });
      for (let i = 0; i < count; i++) {
        await tracker.emit('tool_call', `emitter-${emitter}`, 'completed', { i });
        const pause = plan.pauses[emitter]?.[i] ?? 0;
        if (pause > 0) await sleep(pause);
      }
    }),
  );
  await lead.end({ status: 'completed', answer: 'all events emitted' });
}

/** Everything a reopening client receives over its successive EventSources. */
async function reopeningClient(url: string, plan: Plan): Promise<WorkflowEvent[]> {
  const received: WorkflowEvent[] = [];
  const cut = cutter(plan.cuts);
  for (let round = 0; ; round++) {
    const last = received.at(-1)?.seq;
    // Alternate the two ways of naming a position.
    const byHeader = round % 2 === 1;
    const target = last !== undefined && !byHeader ? `${url}?after=${last}` : url;
    const client = openStream(target, {
      key,
      ...(last !== undefined && byHeader ? { lastEventId: String(last) } : {}),
      cutAfterBytes: cut,
    });
    const stopAfter = plan.reopenAfter[round];
    await within(
      Promise.race([
        client.ended,
        ...(stopAfter === undefined ? [] : [client.received(stopAfter)]),
      ]),
      20_000,
      `round ${round} of a reopening client`,
    );
    client.close();
    received.push(...client.events);
    if (received.at(-1)?.type === 'workflow_end') return received;
  }
}

describe('replay property', () => {
  it(`every persisted event exactly once, in order, to clients that disconnect and reconnect at random points (seed ${SEED})`, async () => {
    const plans = makePlans();
    const url = (workflowId: string) => `${baseUrl}/v1/workflows/${workflowId}/events`;
    const results = await Promise.all(
      plans.map(async (plan) => {
        const workflowId = await insertWorkflow(testApp, tenantId);
        let received: Promise<WorkflowEvent[]>;
        if (plan.mode === 'late') {
          await emit(workflowId, plan);
          const client = openStream(url(workflowId), { key, cutAfterBytes: cutter(plan.cuts) });
          received = client.ended.then(() => client.events);
        } else {
          if (plan.mode === 'reconnecting') {
            const client = openStream(url(workflowId), { key, cutAfterBytes: cutter(plan.cuts) });
            received = client.ended.then(() => client.events);
            await eventually(() => client.connections() > 0, 5_000, 'the client connects');
          } else {
            received = reopeningClient(url(workflowId), plan);
          }
          await emit(workflowId, plan);
        }
        return { workflowId, plan, events: await within(received, 30_000, plan.mode) };
      }),
    );

    for (const { workflowId, plan, events } of results) {
      const stored = await testApp.services.database.db
        .selectFrom('workflow_events')
        .select(['seq', 'type', 'step'])
        .where('workflow_id', '=', workflowId)
        .orderBy('seq')
        .execute();
      expect(stored).toHaveLength(plan.events);
      const label = `${plan.mode} client of ${workflowId}`;
      expect(
        events.map((event) => event.seq),
        label,
      ).toEqual(stored.map((row) => row.seq));
      expect(
        events.map((event) => [event.type, event.step]),
        label,
      ).toEqual(stored.map((row) => [row.type, row.step]));
      expect(events.at(-1)?.type).toBe('workflow_end');
    }
    await eventually(
      () =>
        testApp.app.eventStreams.open.size === 0 &&
        results.every(({ workflowId }) => testApp.services.hub.subscriberCount(workflowId) === 0),
      5_000,
      'every stream and subscription is released',
    );
  });
});

describe('a position past the workflow’s last event', () => {
  async function open(workflowId: string, position: { header?: string; after?: string }) {
    const query = position.after === undefined ? '' : `?after=${position.after}`;
    return fetch(`${baseUrl}/v1/workflows/${workflowId}/events${query}`, {
      headers: {
        ...bearer(key),
        ...(position.header === undefined ? {} : { 'last-event-id': position.header }),
      },
    });
  }

  it('is refused (400 unknown_event_id) rather than streaming a running workflow forever without its end', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();
    await tracker.emit('tool_call', 'step-2', 'completed');
    for (const [position, field] of [
      [{ header: '9999' }, 'headers.last-event-id'],
      [{ after: '3' }, 'query.after'],
    ] as const) {
      const response = await open(workflowId, position);
      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const problem = (await response.json()) as { code: string; errors: unknown[] };
      expect(problem.code).toBe('unknown_event_id');
      expect(problem.errors).toEqual([expect.objectContaining({ field })]);
    }

    // At the last event, the stream waits for the next ones and ends with the workflow.
    const atLast = openStream(`${baseUrl}/v1/workflows/${workflowId}/events`, {
      key,
      lastEventId: '2',
    });
    await eventually(() => atLast.connections() > 0, 5_000, 'the client connects');
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(atLast.ended, 5_000, 'the stream ends');
    expect(atLast.events.map((event) => event.type)).toEqual(['workflow_end']);

    // Finished: at its last event, 204 (stop reconnecting); past it, 400.
    expect((await open(workflowId, { header: '3' })).status).toBe(204);
    expect((await open(workflowId, { header: '4' })).status).toBe(400);
  });
});
