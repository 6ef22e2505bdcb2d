import { once } from 'node:events';
import net from 'node:net';

/**
 * A TCP connection to the app that sends exactly what a test writes and
 * keeps every byte the server writes back, to check what an HTTP client
 * library would hide (a second response, a connection left open).
 */
export interface RawConnection {
  socket: net.Socket;
  received(): string;
  closed: Promise<unknown>;
}

export async function connectRaw(port: number): Promise<RawConnection> {
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => undefined);
  return {
    socket,
    received: () => Buffer.concat(chunks).toString('utf8'),
    closed: once(socket, 'close'),
  };
}
