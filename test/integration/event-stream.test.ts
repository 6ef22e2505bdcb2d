import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowEventRow } from '../../src/store/schema.js';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { toEvent } from '../../src/workflows/rows.js';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  operatorTenant,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * GET /v1/workflows/:id/events over a real socket: the frames, the
 * headers, heartbeats, the end of the stream, replay positions, errors,
 * shutdown, and clients that stop reading.
 */

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ SSE_HEARTBEAT_MS: '50', SSE_RETRY_MS: '20' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

interface ParsedFrame {
  id?: string;
  event?: string;
  data?: string;
  retry?: string;
  comment?: string;
}

function parseFrames(text: string): ParsedFrame[] {
  return text
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const frame: ParsedFrame = {};
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) {
          frame.comment = line.slice(1).trim();
          continue;
        }
        const colon = line.indexOf(':');
        const name = line.slice(0, colon) as keyof ParsedFrame;
        frame[name] = line.slice(colon + 1).replace(/^ /, '');
      }
      return frame;
    });
}

/** Opens the events URL with fetch and collects the body as text until it ends. */
async function openRaw(path: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${baseUrl}${path}`, {
    headers: { ...bearer(key), accept: 'text/event-stream', ...headers },
  });
  let text = '';
  const decoder = new TextDecoder();
  const finished = (async () => {
    if (!response.body) return;
    for await (const chunk of response.body) text += decoder.decode(chunk, { stream: true });
  })();
  return { response, text: () => text, finished };
}

async function finishedWorkflow(events: number): Promise<string> {
  const workflowId = await insertWorkflow(testApp, tenantId);
  const tracker = trackerOn(testApp, { tenantId, workflowId });
  await tracker.begin();
  for (let i = 2; i < events; i++) await tracker.emit('tool_call', `step-${i}`, 'completed');
  await tracker.end({ status: 'completed', answer: 'done' });
  return workflowId;
}

describe('GET /v1/workflows/:id/events', () => {
  it('streams a live workflow: retry first, events with id/event/data, token chunks without id, heartbeats, and ends after workflow_end', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const stream = await openRaw(`/v1/workflows/${workflowId}/events`, {
      'accept-encoding': 'gzip, deflate, br',
    });
    expect(stream.response.status).toBe(200);
    const headers = stream.response.headers;
    expect(headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(headers.get('x-accel-buffering')).toBe('no');
    expect(headers.get('content-encoding')).toBeNull();
    expect(headers.get('x-request-id')).toBeTruthy();

    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin({ mode: 'simple' });
    await sleep(150); // idle: heartbeats
    await tracker.emit('llm_call', 'model', 'started');
    tracker.token('Hel');
    tracker.token('lo, ');
    await tracker.flushTokens();
    tracker.token('world');
    await tracker.emit('answer', 'model', 'completed', { text: 'Hello, world' });
    await tracker.end({ status: 'completed', answer: 'Hello, world' });
    await within(stream.finished, 5_000, 'the stream ends after workflow_end');

    const frames = parseFrames(stream.text());
    expect(frames[0]).toEqual({ retry: '20' });
    expect(frames.some((frame) => frame.comment === 'heartbeat')).toBe(true);
    const persisted = frames.filter((frame) => frame.id !== undefined);
    expect(persisted.map((frame) => [frame.id, frame.event])).toEqual([
      ['1', 'workflow_start'],
      ['2', 'llm_call'],
      ['3', 'answer'],
      ['4', 'workflow_end'],
    ]);
    for (const frame of persisted) {
      const event = JSON.parse(frame.data ?? '');
      expect(event).toMatchObject({ seq: Number(frame.id), workflowId, type: frame.event });
      expect(typeof event.ts).toBe('string');
    }
    const tokenFrames = frames.filter((frame) => frame.event === 'token');
    expect(tokenFrames.every((frame) => frame.id === undefined)).toBe(true);
    const chunks = tokenFrames.map((frame) => JSON.parse(frame.data ?? ''));
    expect(chunks[0]).toMatchObject({ seq: 0, workflowId, type: 'token', status: 'streaming' });
    expect(chunks.map((chunk) => chunk.detail.text).join('')).toBe('Hello, world');
    // Tokens sit between the events they were emitted between.
    const order = frames.filter((frame) => frame.event).map((frame) => frame.event);
    expect(order.indexOf('token')).toBeGreaterThan(order.indexOf('llm_call'));
    expect(order.lastIndexOf('token')).toBeLessThan(order.indexOf('answer'));
    expect(frames.at(-1)?.event).toBe('workflow_end');
    await eventually(
      () => testApp.services.hub.subscriberCount(workflowId) === 0,
      2_000,
      'the subscription is released',
    );
  });

  it('a live event that arrives after a gap is preceded by the missing events, read from the store', async () => {
    const workflowId = await insertWorkflow(testApp, tenantId);
    const stream = await openRaw(`/v1/workflows/${workflowId}/events`);
    const tracker = trackerOn(testApp, { tenantId, workflowId });
    await tracker.begin();
    await eventually(() => stream.text().includes('id: 1\n'), 2_000, 'event 1 arrives');
    // Two events committed, and only the second one published: what a
    // subscriber sees when the publishes of concurrent emitters cross.
    const rows = await testApp.services.database.db.transaction().execute((tx) =>
      workflowEventsRepository(tx).append({
        workflowId,
        tenantId,
        events: ['a', 'b'].map((step) => ({
          type: 'tool_call',
          step,
          status: 'completed',
          detail: {},
          elapsedMs: null,
        })),
      }),
    );
    testApp.services.hub.publish([toEvent(rows[1] as WorkflowEventRow)]);
    await eventually(() => stream.text().includes('id: 3\n'), 2_000, 'event 3 arrives');
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(stream.finished, 5_000, 'the stream ends');
    const ids = parseFrames(stream.text()).flatMap((frame) => frame.id ?? []);
    expect(ids).toEqual(['1', '2', '3', '4']);
  });

  it('a finished workflow is replayed at once and the stream ends; reconnecting after its last event answers 204', async () => {
    const workflowId = await finishedWorkflow(5);
    const stream = await openRaw(`/v1/workflows/${workflowId}/events`);
    await within(stream.finished, 5_000, 'the replay ends');
    const ids = parseFrames(stream.text()).flatMap((frame) => (frame.id ? [frame.id] : []));
    expect(ids).toEqual(['1', '2', '3', '4', '5']);

    const again = await fetch(`${baseUrl}/v1/workflows/${workflowId}/events`, {
      headers: { ...bearer(key), 'last-event-id': '5' },
    });
    expect(again.status).toBe(204);
    expect(await again.text()).toBe('');
  });

  it('a history far longer than SSE_MAX_BUFFERED_EVENTS replays whole to a client that reads: pages wait for the socket', async () => {
    const replica = await startTestAppOn(testApp.database, { SSE_MAX_BUFFERED_EVENTS: '10' });
    try {
      const replicaUrl = await listen(replica);
      const workflowId = await finishedWorkflow(300);
      const response = await fetch(`${replicaUrl}/v1/workflows/${workflowId}/events`, {
        headers: bearer(key),
      });
      const text = await within(response.text(), 10_000, 'the replay ends');
      const ids = parseFrames(text).flatMap((frame) => (frame.id ? [Number(frame.id)] : []));
      expect(ids).toEqual(Array.from({ length: 300 }, (_, index) => index + 1));
    } finally {
      await replica.close();
    }
  });

  it('replays after ?after=, and Last-Event-ID wins over ?after= (a browser reconnecting sends the newer position in it)', async () => {
    const workflowId = await finishedWorkflow(6);
    const after = await openRaw(`/v1/workflows/${workflowId}/events?after=2`);
    await within(after.finished, 5_000, 'the replay after 2 ends');
    expect(parseFrames(after.text()).flatMap((frame) => frame.id ?? [])).toEqual([
      '3',
      '4',
      '5',
      '6',
    ]);

    const both = await openRaw(`/v1/workflows/${workflowId}/events?after=1`, {
      'last-event-id': '4',
    });
    await within(both.finished, 5_000, 'the replay after 4 ends');
    expect(parseFrames(both.text()).flatMap((frame) => frame.id ?? [])).toEqual(['5', '6']);
  });

  it('answers 404 problem+json for an unknown workflow and for another tenant’s, 400 for a malformed Last-Event-ID, 401 without a key', async () => {
    const other = await testApp.services.tenancy.createTenant({ name: 'other tenant' });
    const theirs = await insertWorkflow(testApp, other.tenant.id);
    const unknown = await testApp.app.inject({
      method: 'GET',
      url: '/v1/workflows/7b0c3c1e-1a52-4bd4-9df5-6a4f6d7c2b10/events',
      headers: bearer(key),
    });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(unknown.json()).toMatchObject({ code: 'not_found' });

    const foreign = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${theirs}/events`,
      headers: bearer(key),
    });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({ code: 'not_found' });

    const mine = await insertWorkflow(testApp, tenantId);
    const malformed = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${mine}/events`,
      headers: { ...bearer(key), 'last-event-id': 'abc' },
    });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toMatchObject({ code: 'validation_failed' });

    const anonymous = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${mine}/events`,
    });
    expect(anonymous.statusCode).toBe(401);
  });

  it('closing the app ends open streams with a retry hint, without waiting for their workflows', async () => {
    const replica = await startTestAppOn(testApp.database, { SSE_RETRY_MS: '1234' });
    const replicaUrl = await listen(replica);
    const workflowId = await insertWorkflow(testApp, tenantId);
    const response = await fetch(`${replicaUrl}/v1/workflows/${workflowId}/events`, {
      headers: bearer(key),
    });
    let text = '';
    const finished = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of response.body ?? []) text += decoder.decode(chunk);
    })();
    await eventually(() => text.includes('retry:'), 2_000, 'the stream opened');
    expect(replica.services.hub.subscriberCount(workflowId)).toBe(1);

    const started = Date.now();
    await within(replica.close(), 5_000, 'the replica closes');
    expect(Date.now() - started).toBeLessThan(2_000);
    await within(finished, 2_000, 'the stream ends');
    expect(parseFrames(text).at(-1)).toEqual({ retry: '1234' });
    expect(replica.app.eventStreams.open.size).toBe(0);
  });
});

describe('a client that stops reading', () => {
  /** A raw HTTP client that reads the response head and then stops reading. */
  async function stalledClient(app: TestApp, url: string, workflowId: string) {
    const { port } = new URL(url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await once(socket, 'connect');
    socket.write(
      `GET /v1/workflows/${workflowId}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
        `Authorization: Bearer ${key}\r\nAccept: text/event-stream\r\n\r\n`,
    );
    socket.setEncoding('utf8');
    let received = '';
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined); // a reset is one way of being dropped
    await new Promise<void>((resolve) =>
      socket.once('data', (chunk: string) => {
        received += chunk;
        resolve();
      }),
    );
    socket.pause();
    await eventually(
      () => app.services.hub.subscriberCount(workflowId) === 1,
      2_000,
      'the stream subscribed',
    );
    return {
      /** Reads whatever the server had sent before it let go. */
      async drain(): Promise<string> {
        socket.on('data', (chunk: string) => {
          received += chunk;
        });
        socket.resume();
        await within(closed, 5_000, 'the server closes the connection');
        return received;
      },
    };
  }

  /** Emits large events until the server lets the stream go (or gives up after `max`). */
  async function emitUntilDropped(app: TestApp, workflowId: string, max: number, pauseMs = 0) {
    const tracker = trackerOn(app, { tenantId, workflowId });
    await tracker.begin();
    const bulk = 'x'.repeat(64 * 1024);
    let emitted = 1;
    while (app.services.hub.subscriberCount(workflowId) > 0 && emitted < max) {
      await tracker.emit('tool_call', `step-${emitted}`, 'completed', { bulk });
      emitted += 1;
      if (pauseMs > 0) await sleep(pauseMs);
    }
    return emitted;
  }

  it('is dropped once its backlog passes SSE_MAX_BUFFERED_EVENTS, and the server lets go of its subscription', async () => {
    const replica = await startTestAppOn(testApp.database, {
      SSE_MAX_BUFFERED_EVENTS: '20',
      SSE_HEARTBEAT_MS: '600000',
    });
    try {
      const url = await listen(replica);
      const workflowId = await insertWorkflow(replica, tenantId);
      const client = await stalledClient(replica, url, workflowId);
      const emitted = await emitUntilDropped(replica, workflowId, 2_000);
      expect(replica.services.hub.subscriberCount(workflowId)).toBe(0);
      expect(emitted).toBeLessThan(2_000);
      await eventually(() => replica.app.eventStreams.open.size === 0, 2_000, 'stream released');
      const received = await client.drain();
      expect(received).toContain('event: workflow_start');
      expect(received).not.toContain('event: workflow_end');
    } finally {
      await replica.close();
    }
  });

  it('is dropped when its socket takes nothing for a whole heartbeat interval, even with a small backlog', async () => {
    const replica = await startTestAppOn(testApp.database, {
      SSE_MAX_BUFFERED_EVENTS: '100000',
      SSE_HEARTBEAT_MS: '100',
    });
    try {
      const url = await listen(replica);
      const workflowId = await insertWorkflow(replica, tenantId);
      const client = await stalledClient(replica, url, workflowId);
      const emitted = await emitUntilDropped(replica, workflowId, 2_000, 5);
      expect(replica.services.hub.subscriberCount(workflowId)).toBe(0);
      expect(emitted).toBeLessThan(2_000);
      await eventually(() => replica.app.eventStreams.open.size === 0, 2_000, 'stream released');
      expect(await client.drain()).not.toContain('event: workflow_end');
    } finally {
      await replica.close();
    }
  });
});
