import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request the tool server received. */
export interface ReceivedCall {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export type ToolServerHandler = (call: ReceivedCall, response: ServerResponse) => void;

export interface ToolServer {
  /** `http://127.0.0.1:<port>` */
  origin: string;
  port: number;
  calls: ReceivedCall[];
  /** Answers the next requests; the default echoes the JSON body back. */
  handle(handler: ToolServerHandler): void;
  close(): Promise<void>;
}

const echo: ToolServerHandler = (call, response) => {
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ received: JSON.parse(call.body || 'null') }));
};

/** A local HTTP tool server on 127.0.0.1 recording every call. */
export async function startToolServer(): Promise<ToolServer> {
  const calls: ReceivedCall[] = [];
  let handler = echo;
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const call: ReceivedCall = {
        method: request.method ?? '',
        path: request.url ?? '',
        headers: request.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      calls.push(call);
      handler(call, response);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    calls,
    handle(next) {
      handler = next;
    },
    async close() {
      // Hanging handlers (timeout tests) would keep close() waiting forever.
      server.closeAllConnections();
      await new Promise<void>((resolve, reject) =>
        server.close((error) => (error ? reject(error) : resolve())),
      );
    },
  };
}
