import http from 'node:http';
import { isMainThread } from 'node:worker_threads';
import { serveLoadRequests } from '../support/load-thread.js';
import { currentTaskId } from '../support/machine-cpu.js';
import { startBenchProvider, type TimeInside } from './provider.js';
import { runWorkflows, type ServiceTarget, type WorkflowRun } from './workload.js';

/**
 * bench/simple-path's load: the scripted fake provider and the clients.
 * The same code runs in the benchmark's own thread (`--one-loop`) or in a
 * worker thread (load-thread.ts), where it answers the requests below.
 */

export interface TimedRun extends WorkflowRun {
  /** Time spent inside the fake provider for this workflow, and its requests; undefined when the fake runs elsewhere. */
  inside: TimeInside | undefined;
}

const NO_REQUESTS: TimeInside = {
  ms: 0,
  requests: 0,
  firstArrivedAt: Number.NaN,
  lastEndedAt: Number.NaN,
  betweenMs: 0,
};

export type LoadRequest =
  | { kind: 'start'; provider: { port: number; host: string } | undefined; maxSockets: number }
  | { kind: 'run'; target: ServiceTarget; first: number; count: number; concurrency: number }
  | { kind: 'stray' }
  | { kind: 'close' };

export interface SimplePathLoad {
  /** The Linux task id of the thread the load runs on (undefined off Linux), for bench/support/machine-cpu.ts. */
  taskId: number | undefined;
  /** The fake's OpenAI base URL, when this load started one. */
  providerUrl: string | undefined;
  run(input: {
    target: ServiceTarget;
    first: number;
    count: number;
    concurrency: number;
  }): Promise<{ runs: TimedRun[]; elapsedMs: number }>;
  /** Requests the fake got that carried no bench question. */
  stray(): Promise<number>;
  close(): Promise<void>;
}

export async function startSimplePathLoad(options: {
  provider: { port: number; host: string } | undefined;
  maxSockets: number;
  signal?: AbortSignal;
}): Promise<SimplePathLoad> {
  const provider = options.provider ? await startBenchProvider(options.provider) : undefined;
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.maxSockets });
  const signal = options.signal ?? new AbortController().signal;
  return {
    taskId: currentTaskId(),
    providerUrl: provider?.server.openaiBaseUrl,
    async run(input) {
      const { runs, elapsedMs } = await runWorkflows({ ...input, agent, signal });
      return {
        runs: runs.map((one) => ({
          ...one,
          inside: provider ? (provider.timeInside(one.n) ?? NO_REQUESTS) : undefined,
        })),
        elapsedMs,
      };
    },
    stray: async () => provider?.strayRequests() ?? 0,
    async close() {
      // Idle keep-alive sockets first: they would hold the service's close.
      agent.destroy();
      await provider?.server.close();
    },
  };
}

if (!isMainThread) {
  let load: SimplePathLoad | undefined;
  serveLoadRequests(async (body) => {
    const request = body as LoadRequest;
    switch (request.kind) {
      case 'start':
        load = await startSimplePathLoad(request);
        return { providerUrl: load.providerUrl, taskId: load.taskId };
      case 'run':
        if (!load) throw new Error('start the load first');
        return load.run(request);
      case 'stray':
        return load?.stray() ?? 0;
      case 'close':
        await load?.close();
        return null;
    }
  });
}
