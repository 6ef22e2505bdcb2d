import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createProviderFetch, isRefusedRedirect } from '../../../src/llm/provider-fetch.js';

/** What the local server saw of one request. */
interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  remotePort: number;
}

let server: http.Server;
let baseUrl: string;
let seen: Seen[] = [];
let handle: (request: http.IncomingMessage, response: http.ServerResponse) => void;
const transport = createProviderFetch();

beforeAll(async () => {
  server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => {
      body += chunk;
    });
    request.on('end', () => {
      seen.push({
        method: request.method ?? '',
        url: request.url ?? '',
        headers: request.headers,
        body,
        remotePort: request.socket.remotePort ?? 0,
      });
      handle(request, response);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(() => {
  seen = [];
});
afterAll(async () => {
  transport.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

async function readAll(body: AsyncIterable<Uint8Array>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

/** The response as the SDKs read it: its body is an async iterable of bytes. */
function bodyOf(response: Response): AsyncIterable<Uint8Array> {
  return response.body as unknown as AsyncIterable<Uint8Array>;
}

describe('the provider fetch', () => {
  it('sends the method, headers and body, streams the reply, and the next request reuses the connection', async () => {
    handle = (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req_1' });
      response.write('data: one\n\n');
      setTimeout(() => response.end('data: two\n\n'), 20);
    };
    const headers = new Headers({ 'content-type': 'application/json', authorization: 'Bearer k' });
    const first = await transport.fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'post',
      headers,
      body: JSON.stringify({ model: 'm', input: 'héllo' }),
    });
    expect(first.ok).toBe(true);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-request-id')).toBe('req_1');
    expect(await readAll(bodyOf(first))).toBe('data: one\n\ndata: two\n\n');
    const second = await transport.fetch(`${baseUrl}/v1/models`, { headers: [['accept', 'x']] });
    expect(await second.text()).toBe('data: one\n\ndata: two\n\n');

    expect(seen[0]).toMatchObject({
      method: 'POST',
      url: '/v1/chat/completions',
      body: '{"model":"m","input":"héllo"}',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer k',
        'content-length': String(Buffer.byteLength('{"model":"m","input":"héllo"}')),
      },
    });
    expect(seen[1]).toMatchObject({ method: 'GET', url: '/v1/models', headers: { accept: 'x' } });
    expect(seen[1]?.remotePort).toBe(seen[0]?.remotePort);
  });

  it('an error status is a response, its body readable as text or JSON', async () => {
    handle = (_request, response) => {
      response.writeHead(429, { 'retry-after': '2', 'content-type': 'application/json' });
      response.end('{"error":{"message":"slow down"}}');
    };
    const response = await transport.fetch(`${baseUrl}/v1/x`, { method: 'POST', body: '{}' });
    expect(response.ok).toBe(false);
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(await response.json()).toEqual({ error: { message: 'slow down' } });
  });

  it('refuses a redirect without asking where it points', async () => {
    handle = (_request, response) => {
      response.writeHead(307, { location: `${baseUrl}/elsewhere` });
      response.end();
    };
    const refused = await transport.fetch(`${baseUrl}/v1/x`, { method: 'POST', body: '{}' }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isRefusedRedirect(refused)).toBe(true);
    expect(isRefusedRedirect(new Error('wrapped', { cause: refused }))).toBe(true);
    expect(isRefusedRedirect(new Error('something else'))).toBe(false);
    expect(seen.map((request) => request.url)).toEqual(['/v1/x']);
  });

  it('decodes a gzip body the server compressed anyway', async () => {
    handle = (_request, response) => {
      response.writeHead(200, { 'content-encoding': 'gzip' });
      response.end(gzipSync('data: compressed\n\n'));
    };
    const response = await transport.fetch(`${baseUrl}/v1/x`);
    expect(await readAll(bodyOf(response))).toBe('data: compressed\n\n');
  });

  it('an abort before the reply rejects with an AbortError carrying the reason', async () => {
    handle = () => {
      // Never answers: the abort ends the request.
    };
    const controller = new AbortController();
    const pending = transport.fetch(`${baseUrl}/v1/x`, {
      method: 'POST',
      body: '{}',
      signal: controller.signal,
    });
    await waitFor(() => seen.length === 1);
    controller.abort(new Error('the run was cancelled'));
    await expect(pending).rejects.toMatchObject({
      name: 'AbortError',
      cause: { message: 'the run was cancelled' },
    });
    const aborted = new AbortController();
    aborted.abort();
    await expect(
      transport.fetch(`${baseUrl}/v1/x`, { signal: aborted.signal }),
    ).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('an abort while the body is read ends it with an AbortError, and the next request gets a new connection', async () => {
    handle = (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: first\n\n');
      // Then silence: the reader aborts.
    };
    const controller = new AbortController();
    const response = await transport.fetch(`${baseUrl}/v1/x`, { signal: controller.signal });
    const read: string[] = [];
    const reading = (async () => {
      for await (const chunk of bodyOf(response)) {
        read.push(Buffer.from(chunk).toString('utf8'));
        controller.abort();
      }
    })();
    await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
    expect(read).toEqual(['data: first\n\n']);

    handle = (_request, reply) => reply.end('fresh');
    expect(await (await transport.fetch(`${baseUrl}/v1/y`)).text()).toBe('fresh');
    expect(seen[1]?.remotePort).not.toBe(seen[0]?.remotePort);
  });

  it('a refused connection rejects', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await expect(transport.fetch(`http://127.0.0.1:${port}/v1/x`)).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
  });
});

async function waitFor(condition: () => boolean): Promise<void> {
  for (let tries = 0; !condition(); tries++) {
    if (tries > 200) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
