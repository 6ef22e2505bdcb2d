import { parentPort, Worker } from 'node:worker_threads';

/**
 * A benchmark's load generator (clients, fake provider) in a worker
 * thread: the service under test keeps the main thread's event loop to
 * itself, as it would with its clients and its model provider elsewhere,
 * while the load still runs on the same machine. Requests and replies are
 * structured-cloned messages, matched by id.
 */

interface Request {
  id: number;
  body: unknown;
}

type Reply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

export interface LoadThread {
  /** Sends `body` to the thread's handler and resolves with its answer. */
  call<T>(body: unknown): Promise<T>;
  /** Stops the thread (whatever it still runs is dropped). */
  close(): Promise<void>;
}

/** Starts `entry` (a module that calls `serveLoadRequests`) in a worker thread. */
export function startLoadThread(entry: URL): LoadThread {
  const worker = new Worker(new URL('./ts-worker.mjs', import.meta.url), {
    workerData: { entry: entry.href },
  });
  const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  let next = 0;
  let failure: Error | undefined;
  const failAll = (error: Error) => {
    failure ??= error;
    for (const waiter of pending.values()) waiter.reject(error);
    pending.clear();
  };
  worker.on('message', (reply: Reply) => {
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    if (reply.ok) waiter.resolve(reply.value);
    else waiter.reject(new Error(reply.error));
  });
  worker.on('error', failAll);
  worker.on('exit', (code) => failAll(new Error(`the load thread exited (code ${code})`)));
  return {
    call<T>(body: unknown): Promise<T> {
      if (failure) return Promise.reject(failure);
      const id = ++next;
      return new Promise<T>((resolve, reject) => {
        pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
        worker.postMessage({ id, body } satisfies Request);
      });
    },
    async close(): Promise<void> {
      await worker.terminate();
    },
  };
}

/** In the worker: answers each request with `handle`'s result (or its error's message). */
export function serveLoadRequests(handle: (body: unknown) => Promise<unknown>): void {
  const port = parentPort;
  if (!port) throw new Error('serveLoadRequests runs in a worker thread');
  port.on('message', (request: Request) => {
    handle(request.body).then(
      (value) => port.postMessage({ id: request.id, ok: true, value } satisfies Reply),
      (error: unknown) =>
        port.postMessage({
          id: request.id,
          ok: false,
          error: error instanceof Error ? (error.stack ?? error.message) : String(error),
        } satisfies Reply),
    );
  });
}
