import { buildApp } from '../../src/http/app.js';
import type { Subscriber } from '../../src/tracker/event-hub.js';
import { createWorkflowTracker } from '../../src/tracker/tracker.js';
import { type Cleanup, createBenchServices, withCleanups } from '../support/harness.js';

/**
 * The server side of bench/sse-fanout: the real services and the real app
 * listening on loopback, in a process of its own, one per subscriber count,
 * so its RSS is the server's alone and starts fresh. Spawned by index.ts
 * with --expose-gc; driven over IPC.
 */

export interface ServerOptions {
  databaseUrl: string;
  tenantId: string;
  workflowId: string;
}

export type ToServer =
  /** Hub transport: subscribe `count` counting subscribers to the workflow. */
  | { type: 'subscribe'; count: number }
  | { type: 'unsubscribe' }
  /** Reply with RSS after a full GC. */
  | { type: 'measure' }
  | { type: 'emit'; n: number }
  | { type: 'stop' };

export type FromServer =
  | { type: 'ready'; url: string; hasEventsRoute: boolean; gc: boolean }
  | { type: 'subscribed' }
  | { type: 'measured'; rssBytes: number; heapUsedBytes: number }
  | {
      type: 'emitted';
      seq: number;
      /** Hub transport: from calling emit until the last subscriber had the event. */
      latencyMs: number | null;
      /** From calling emit until it returned: commit, then the hub's synchronous delivery (socket writes included). */
      emitMs: number;
    }
  | { type: 'failed'; message: string };

const EVENTS_ROUTE = '/v1/workflows/:id/events';

function send(message: FromServer): void {
  process.send?.(message);
}

async function main(): Promise<void> {
  const options = JSON.parse(process.argv[2] ?? '') as ServerOptions;
  await withCleanups('sse-fanout server', (cleanups) => serve(options, cleanups));
}

/** Serves until the driver sends `stop`; the app and services are closed by the cleanups. */
async function serve(options: ServerOptions, cleanups: Cleanup[]): Promise<void> {
  // The database is the driver's, already migrated.
  const services = await createBenchServices(cleanups, {
    databaseUrl: options.databaseUrl,
    // 1,000,000 is the most RATE_LIMIT_MAX accepts: 10,000 connections from one key must pass.
    env: { RATE_LIMIT_MAX: '1000000' },
  });
  const log = services.log;
  await services.hub.start();
  // Built and listening whatever the transport, so both measure the same server.
  const app = await buildApp(services);
  cleanups.push(() => app.close());
  const hasEventsRoute = app.hasRoute({ method: 'GET', url: EVENTS_ROUTE });
  // Thousands of connections arrive at once; the default backlog (511) would drop some.
  const url = await app.listen({ host: '127.0.0.1', port: 0, backlog: 4096 });
  const tracker = createWorkflowTracker({
    db: services.database.db,
    hub: services.hub,
    tenantId: options.tenantId,
    workflowId: options.workflowId,
    origin: services.replicaId,
    log,
  });

  let unsubscribes: (() => void)[] = [];
  // Hub transport: how many subscribers have each seq, and when the last one got it.
  let expected = 0;
  const delivered = new Map<number, number>();
  const completedAt = new Map<number, number>();
  const subscriber = (): Subscriber => {
    let lastSeq = 0;
    return {
      onEvent(event) {
        if (event.seq <= lastSeq) return;
        lastSeq = event.seq;
        const count = (delivered.get(event.seq) ?? 0) + 1;
        delivered.set(event.seq, count);
        if (count === expected) completedAt.set(event.seq, performance.now());
      },
      onTokens() {},
    };
  };

  const stopped = new Promise<void>((resolve) => {
    process.on('message', (message: ToServer) => {
      handle(message).catch((error: unknown) =>
        send({ type: 'failed', message: error instanceof Error ? error.message : String(error) }),
      );
      if (message.type === 'stop') resolve();
    });
  });

  async function handle(message: ToServer): Promise<void> {
    switch (message.type) {
      case 'subscribe':
        expected = message.count;
        unsubscribes = Array.from({ length: message.count }, () =>
          services.hub.subscribe(options.workflowId, subscriber()),
        );
        send({ type: 'subscribed' });
        return;
      case 'unsubscribe':
        for (const unsubscribe of unsubscribes) unsubscribe();
        unsubscribes = [];
        expected = 0;
        send({ type: 'subscribed' });
        return;
      case 'measure': {
        // Twice: the first pass only queues finalizers that the second
        // collects; then a pause for closed sockets and freed pages to settle.
        globalThis.gc?.();
        globalThis.gc?.();
        await new Promise((resolve) => setTimeout(resolve, 250));
        globalThis.gc?.();
        const usage = process.memoryUsage();
        send({ type: 'measured', rssBytes: usage.rss, heapUsedBytes: usage.heapUsed });
        return;
      }
      case 'emit': {
        const started = performance.now();
        const event = await tracker.emit('warning', 'bench', 'info', { n: message.n });
        const emitMs = performance.now() - started;
        const done = completedAt.get(event.seq);
        send({
          type: 'emitted',
          seq: event.seq,
          latencyMs: expected > 0 && done !== undefined ? done - started : null,
          emitMs,
        });
        return;
      }
      case 'stop':
        return;
    }
  }

  send({ type: 'ready', url, hasEventsRoute, gc: typeof globalThis.gc === 'function' });
  await stopped;
  tracker.close();
  for (const unsubscribe of unsubscribes) unsubscribe();
}

main()
  .catch((error: unknown) => {
    send({
      type: 'failed',
      message: error instanceof Error ? (error.stack ?? error.message) : String(error),
    });
    process.exitCode = 1;
  })
  // Only once the failure is sent: a send after disconnecting throws ERR_IPC_CHANNEL_CLOSED.
  .finally(() => process.disconnect?.());
