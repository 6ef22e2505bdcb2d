import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { FromServer, ServerOptions, ToServer } from './server.js';

/**
 * bench/sse-fanout's server process (server.ts), spawned per subscriber
 * count with --expose-gc so its RSS is its own, and driven over IPC; its
 * service modules are tsc's output, as the other benchmarks' are.
 */

const serverFile = fileURLToPath(new URL('./server.ts', import.meta.url));
/** The service's modules from tsc's output, as bench/run.ts has them (it built them). */
const builtService = new URL('../support/use-built-service.mjs', import.meta.url).href;

export type Reply<T extends FromServer['type']> = Extract<FromServer, { type: T }>;

export interface ServerProcess {
  /** The next message of `type`; a `failed` message or an exit rejects instead. */
  reply<T extends FromServer['type']>(type: T): Promise<Reply<T>>;
  request<T extends FromServer['type']>(message: ToServer, type: T): Promise<Reply<T>>;
  /** Asks the process to close everything and exit; kills it if it has not within 10 s. */
  stop(): Promise<void>;
}

export function startServer(options: ServerOptions): ServerProcess {
  const child: ChildProcess = spawn(
    process.execPath,
    [
      '--expose-gc',
      '--import',
      'tsx',
      '--import',
      builtService,
      serverFile,
      JSON.stringify(options),
    ],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let waiter:
    | { type: string; resolve(message: FromServer): void; reject(error: Error): void }
    | undefined;
  const fail = (error: Error) => {
    const current = waiter;
    waiter = undefined;
    current?.reject(error);
  };
  child.on('message', (message: FromServer) => {
    if (message.type === 'failed') return fail(new Error(`server: ${message.message}`));
    if (waiter?.type !== message.type) return;
    const current = waiter;
    waiter = undefined;
    current.resolve(message);
  });
  void exited.then((code) => fail(new Error(`the server process exited (${code})`)));

  const reply = <T extends FromServer['type']>(type: T): Promise<Reply<T>> =>
    new Promise((resolve, reject) => {
      waiter = { type, resolve: resolve as (message: FromServer) => void, reject };
    });
  return {
    reply,
    request(message, type) {
      const answered = reply(type);
      child.send(message);
      return answered;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      if (child.connected) child.send({ type: 'stop' } satisfies ToServer);
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
