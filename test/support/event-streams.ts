import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventSource, type FetchLike } from 'eventsource';
import { expect } from 'vitest';
import { createWorkflowTracker, type WorkflowTracker } from '../../src/tracker/tracker.js';
import { EVENT_TYPES, type WorkflowEvent } from '../../src/workflows/types.js';
import { bearer, type TestApp } from './app.js';

/**
 * Helpers for tests of the event streams: workflows made directly in the
 * database, events emitted through the real WorkflowTracker, and clients on
 * the real `eventsource` package over real sockets.
 */

/** Listens on a free port of 127.0.0.1; returns the base URL. */
export async function listen(testApp: TestApp): Promise<string> {
  return testApp.app.listen({ port: 0, host: '127.0.0.1' });
}

/**
 * Closes a test app whose streams are over. Undici opens a fresh socket
 * after a fetch is aborted mid-body (as EventSource.close() does); one that
 * never carried a request counts as busy for Node until its headersTimeout
 * (a minute), which would hold app.close() that long. So every connection
 * left is closed first.
 */
export async function closeTestApp(testApp: TestApp): Promise<void> {
  testApp.app.server.closeAllConnections();
  await testApp.close();
}

/** The operator tenant and its admin key, from the bootstrap of the empty test database. */
export async function operatorTenant(testApp: TestApp): Promise<{ tenantId: string; key: string }> {
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  return { tenantId: created.tenant.id, key: created.adminKey.secret };
}

/**
 * A workflow of the tenant, inserted directly (no executor runs it):
 * queued, or `completed` (its events URL answers 204 at once).
 */
export async function insertWorkflow(
  testApp: TestApp,
  tenantId: string,
  status: 'queued' | 'completed' = 'queued',
): Promise<string> {
  const id = randomUUID();
  await testApp.services.database.db
    .insertInto('workflows')
    .values({
      id,
      tenant_id: tenantId,
      status,
      mode: 'simple',
      model: 'scripted',
      input: 'a question for the stream tests',
      tools: [],
      metadata: '{}',
      finished_at: status === 'completed' ? new Date() : null,
    })
    .execute();
  return id;
}

/**
 * The events URL, with a stream token, of a completed workflow of the
 * tenant inserted for it (insertWorkflow): what a browser's EventSource
 * opens. Its events URL answers 204 at once.
 */
export async function completedStreamUrl(
  testApp: TestApp,
  tenant: { id: string; key: string },
): Promise<string> {
  const workflowId = await insertWorkflow(testApp, tenant.id, 'completed');
  const issued = await testApp.app.inject({
    method: 'POST',
    url: `/v1/workflows/${workflowId}/stream-token`,
    headers: bearer(tenant.key),
  });
  expect(issued.statusCode, issued.body).toBe(200);
  return issued.json().url as string;
}

/** A WorkflowTracker emitting through the given app's hub, as that replica's orchestrator would. */
export function trackerOn(
  testApp: TestApp,
  ids: { tenantId: string; workflowId: string },
  tokenFlushMs = 5,
): WorkflowTracker {
  return createWorkflowTracker({
    db: testApp.services.database.db,
    hub: testApp.services.hub,
    tenantId: ids.tenantId,
    workflowId: ids.workflowId,
    origin: testApp.services.replicaId,
    log: testApp.services.log,
    tokenFlushMs,
  });
}

export interface StreamClientOptions {
  /** Sent as a Bearer API key on every connection. */
  key?: string;
  /** Sent as Last-Event-ID until the EventSource has received an id of its own. */
  lastEventId?: string;
  /** Bytes after which a connection's body breaks, or undefined to leave it whole. */
  cutAfterBytes?: () => number | undefined;
}

/** An EventSource that records what it receives and closes itself after `workflow_end`. */
export interface StreamClient {
  events: WorkflowEvent[];
  /** Token chunk texts, in order. */
  tokens: string[];
  /** Seqs of events and 'token' for chunks, in arrival order. */
  arrivals: (number | 'token')[];
  /** Connections opened (reconnections included). */
  connections(): number;
  /** Resolves after `workflow_end`; rejects when the EventSource gives up. */
  ended: Promise<void>;
  /** Resolves once `count` persisted events have arrived. */
  received(count: number): Promise<void>;
  lastEventId(): string | undefined;
  close(): void;
}

export function openStream(url: string, options: StreamClientOptions = {}): StreamClient {
  const events: WorkflowEvent[] = [];
  const tokens: string[] = [];
  const arrivals: (number | 'token')[] = [];
  let connections = 0;
  const fetchWith: FetchLike = async (input, init) => {
    connections += 1;
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(init.headers ?? {})) {
      headers[name.toLowerCase()] = value;
    }
    if (options.key) headers.authorization = `Bearer ${options.key}`;
    // Until the EventSource has an id of its own, it would reconnect without one.
    if (options.lastEventId && !headers['last-event-id']) {
      headers['last-event-id'] = options.lastEventId;
    }
    const response = await fetch(input, { ...init, headers });
    const cut = options.cutAfterBytes?.();
    if (cut === undefined || !response.body) return response;
    return new Response(cutBody(response.body, cut), {
      status: response.status,
      headers: response.headers,
    });
  };
  const source = new EventSource(url, { fetch: fetchWith });
  let resolveEnded: () => void = () => undefined;
  let rejectEnded: (error: Error) => void = () => undefined;
  const ended = new Promise<void>((resolve, reject) => {
    resolveEnded = resolve;
    rejectEnded = reject;
  });
  ended.catch(() => undefined); // observed by whoever awaits it
  for (const type of EVENT_TYPES) {
    if (type === 'token') continue;
    source.addEventListener(type, (message) => {
      const event = JSON.parse(message.data) as WorkflowEvent;
      events.push(event);
      arrivals.push(event.seq);
      if (type === 'workflow_end') {
        source.close();
        resolveEnded();
      }
    });
  }
  source.addEventListener('token', (message) => {
    const chunk = JSON.parse(message.data) as WorkflowEvent;
    tokens.push(String(chunk.detail.text));
    arrivals.push('token');
  });
  source.addEventListener('error', (error) => {
    if (source.readyState === source.CLOSED) {
      rejectEnded(new Error(`the event stream failed: ${error.code ?? ''} ${error.message ?? ''}`));
    }
  });
  return {
    events,
    tokens,
    arrivals,
    connections: () => connections,
    ended,
    async received(count) {
      while (events.length < count) await sleep(10);
    },
    lastEventId: () => {
      const last = events.at(-1);
      return last && String(last.seq);
    },
    close: () => source.close(),
  };
}

/**
 * A body that breaks after `bytes`: the chunk that crosses the limit is cut
 * (often mid-frame) and the stream errors, which an EventSource treats as a
 * lost connection and answers by reconnecting with its Last-Event-ID.
 */
function cutBody(body: ReadableStream<Uint8Array>, bytes: number): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let passed = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) {
        controller.close();
        return;
      }
      if (passed + value.length < bytes) {
        passed += value.length;
        controller.enqueue(value);
        return;
      }
      controller.enqueue(value.subarray(0, bytes - passed));
      controller.error(new Error('connection cut by the test'));
      await reader.cancel();
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/** Fails with `label` when `promise` takes longer than `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, label: string): Promise<T> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      promise,
      sleep(ms, undefined, { signal: timer.signal }).then(() => {
        throw new Error(`${label}: not within ${ms} ms`);
      }),
    ]);
  } finally {
    timer.abort();
  }
}

/** Polls `check` until it holds. */
export async function eventually(check: () => boolean, ms: number, label: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${label}: not within ${ms} ms`);
    await sleep(10);
  }
}

/** mulberry32: a small seeded generator, so a failing run can be replayed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
