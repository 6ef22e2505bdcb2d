import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  openStream,
  operatorTenant,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * Two replicas on one database: events emitted on A reach a subscriber of
 * B through LISTEN/NOTIFY, token chunks included, and B losing its
 * listening connection mid-stream costs its subscribers nothing.
 */

let replicaA: TestApp;
let replicaB: TestApp;
let urlB: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  replicaA = await startTestApp({ SSE_RETRY_MS: '20' });
  replicaB = await startTestAppOn(replicaA.database, { SSE_RETRY_MS: '20' });
  urlB = await listen(replicaB);
  ({ tenantId, key } = await operatorTenant(replicaA));
});

afterAll(async () => {
  if (replicaB) await closeTestApp(replicaB);
  if (replicaA) await closeTestApp(replicaA);
});

function eventsUrl(workflowId: string): string {
  return `${urlB}/v1/workflows/${workflowId}/events`;
}

describe('event streams across replicas', () => {
  it('a subscriber on replica B receives the events and the token chunks emitted on replica A, in order', async () => {
    const workflowId = await insertWorkflow(replicaA, tenantId);
    const client = openStream(eventsUrl(workflowId), { key });
    await eventually(
      () => replicaB.services.hub.subscriberCount(workflowId) === 1,
      5_000,
      'B subscribed',
    );

    // Tokens flushed at once: their NOTIFY follows the event's by well under
    // the time B takes to read that event from the store.
    const tracker = trackerOn(replicaA, { tenantId, workflowId }, 0);
    await tracker.begin();
    await tracker.emit('llm_call', 'model', 'started');
    const text = 'Tokens travel inline on NOTIFY, coalesced, to every replica.';
    for (const word of text.split(/(?<= )/)) {
      tracker.token(word);
      await tracker.flushTokens();
    }
    await tracker.emit('answer', 'model', 'completed', { text });
    await tracker.end({ status: 'completed', answer: text });
    await within(client.ended, 10_000, 'the stream on B ends');

    expect(client.events.map((event) => event.type)).toEqual([
      'workflow_start',
      'llm_call',
      'answer',
      'workflow_end',
    ]);
    expect(client.events.map((event) => event.seq)).toEqual([1, 2, 3, 4]);
    expect(client.tokens.join('')).toBe(text);
    // Token chunks arrive after the event emitted before them and before the next one.
    const firstToken = client.arrivals.indexOf('token');
    const lastToken = client.arrivals.lastIndexOf('token');
    expect(client.arrivals.indexOf(2)).toBeLessThan(firstToken);
    expect(lastToken).toBeLessThan(client.arrivals.indexOf(3));
  });

  it('killing B’s listening connection mid-stream loses nothing: the hub reconnects and catches up from the store', async () => {
    const workflowId = await insertWorkflow(replicaA, tenantId);
    const client = openStream(eventsUrl(workflowId), { key });
    await eventually(
      () => replicaB.services.hub.subscriberCount(workflowId) === 1,
      5_000,
      'B subscribed',
    );
    const tracker = trackerOn(replicaA, { tenantId, workflowId });
    await tracker.begin();
    for (let i = 0; i < 5; i++) await tracker.emit('tool_call', `before-${i}`, 'completed');
    await within(client.received(6), 5_000, 'the first events reach B');

    const pid = replicaB.services.hub.listenerPid();
    expect(pid).toBeTypeOf('number');
    await sql`SELECT pg_terminate_backend(${pid})`.execute(replicaA.services.database.db);
    // Emitted while B is not listening: only the store has them.
    for (let i = 0; i < 10; i++) await tracker.emit('tool_call', `during-${i}`, 'completed');
    await eventually(
      () => replicaB.services.hub.isListening() && replicaB.services.hub.listenerPid() !== pid,
      10_000,
      'B listens again',
    );
    for (let i = 0; i < 5; i++) await tracker.emit('tool_call', `after-${i}`, 'completed');
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(client.ended, 10_000, 'the stream on B ends');

    expect(client.events.map((event) => event.seq)).toEqual(
      Array.from({ length: 22 }, (_, index) => index + 1),
    );
    expect(client.events.at(-1)?.type).toBe('workflow_end');
    expect(client.connections()).toBe(1);
  });

  it('a stream token issued by replica A opens the stream on replica B (one signing secret per deployment)', async () => {
    const workflowId = await insertWorkflow(replicaA, tenantId);
    const issued = await replicaA.app.inject({
      method: 'POST',
      url: `/v1/workflows/${workflowId}/stream-token`,
      headers: { authorization: `Bearer ${key}` },
    });
    expect(issued.statusCode, issued.body).toBe(200);
    const { url } = issued.json() as { url: string };
    const client = openStream(`${urlB}${url}`);
    const tracker = trackerOn(replicaA, { tenantId, workflowId });
    await tracker.begin();
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(client.ended, 10_000, 'the stream on B ends');
    expect(client.events.map((event) => event.type)).toEqual(['workflow_start', 'workflow_end']);
  });
});
