import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGuardedFetch } from '../../../src/tools/guarded-fetch.js';
import { BlockedAddressError } from '../../../src/tools/network-guard.js';

let server: Server;
let origin: string;
/** Ends the open event stream of the `/stream` request. */
let endStream: (() => void) | undefined;

beforeAll(async () => {
  server = createServer((request, response) => {
    if (request.url === '/stream') {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: first\n\n');
      endStream = () => response.end('data: last\n\n');
      return;
    }
    if (request.url === '/empty') {
      response.writeHead(204).end();
      return;
    }
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      response.writeHead(200, { 'content-type': 'application/json', 'x-seen': 'a' });
      response.end(
        JSON.stringify({ method: request.method, body: Buffer.concat(chunks).toString() }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const allowed = createGuardedFetch({ allowPrivate: true, maxBytes: 1024 });

describe('createGuardedFetch', () => {
  it('sends the method, headers and body, and answers a Response', async () => {
    const response = await allowed(`${origin}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"x":1}',
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('x-seen')).toBe('a');
    expect(await response.json()).toEqual({ method: 'POST', body: '{"x":1}' });
  });

  it('streams the body: the first event arrives while the response is still open', async () => {
    const response = await allowed(`${origin}/stream`);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    expect(Buffer.from(first.value ?? []).toString()).toBe('data: first\n\n');
    endStream?.();
    await reader.cancel();
  });

  it('has no body for 204', async () => {
    const response = await allowed(`${origin}/empty`);
    expect(response.status).toBe(204);
    expect(response.body).toBeNull();
  });

  it('fails the body past maxBytes', async () => {
    const small = createGuardedFetch({ allowPrivate: true, maxBytes: 10 });
    const response = await small(`${origin}/echo`, { method: 'POST', body: 'x'.repeat(100) });
    await expect(response.text()).rejects.toThrow();
  });

  it('refuses a private address unless allowed, before connecting', async () => {
    const strict = createGuardedFetch({ allowPrivate: false, maxBytes: 1024 });
    await expect(strict(`${origin}/echo`)).rejects.toBeInstanceOf(BlockedAddressError);
    const rebinding = createGuardedFetch({
      allowPrivate: false,
      maxBytes: 1024,
      resolver: async () => [{ address: '192.168.1.5', family: 4 }],
    });
    await expect(rebinding('http://mcp.example.com/mcp')).rejects.toBeInstanceOf(
      BlockedAddressError,
    );
  });
});
