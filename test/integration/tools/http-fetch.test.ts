import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import {
  createHttpFetchTool,
  type HttpFetchOptions,
} from '../../../src/tools/builtins/http-fetch.js';
import { builtinTools, createToolRegistry } from '../../../src/tools/registry.js';
import type { Tool, ToolContext } from '../../../src/tools/types.js';

/**
 * http_fetch against a real HTTP server on 127.0.0.1: the loopback address
 * it is refused by default, and reaches once private addresses are allowed.
 */

interface Seen {
  path: string;
  host: string | undefined;
}

let server: http.Server;
let port: number;
const seen: Seen[] = [];
let slowBodyClosed: Promise<void> = Promise.resolve();
let bigResponseClosed: Promise<void> = Promise.resolve();

function route(request: http.IncomingMessage, response: http.ServerResponse): void {
  const url = new URL(request.url ?? '/', 'http://fixture');
  seen.push({ path: url.pathname, host: request.headers.host });
  const redirect = (location: string, status = 302) => {
    response.writeHead(status, { location });
    response.end('moved');
  };
  const chain = /^\/chain\/(\d+)$/.exec(url.pathname);
  if (chain) {
    const left = Number(chain[1]);
    redirect(left === 0 ? '/hello' : `/chain/${left - 1}`);
    return;
  }
  switch (url.pathname) {
    case '/hello':
      response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      response.end('hello from the fixture');
      return;
    case '/latin1':
      response.writeHead(200, { 'content-type': 'text/html; charset=iso-8859-1' });
      response.end(Buffer.from([0x63, 0x61, 0x66, 0xe9])); // "café" in Latin-1
      return;
    case '/binary':
      response.writeHead(200, { 'content-type': 'image/png' });
      response.end(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]));
      return;
    case '/not-found':
      response.writeHead(404, { 'content-type': 'application/json' });
      response.end('{"error":"no such thing"}');
      return;
    case '/big': {
      // 4 MiB in 64 KiB chunks, honouring backpressure; the client should hang up long before.
      response.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(64 * 1024, 'a');
      let sent = 0;
      const pump = () => {
        while (sent < 64 && !response.destroyed) {
          sent++;
          if (!response.write(chunk)) return void response.once('drain', pump);
        }
        response.end();
      };
      bigResponseClosed = once(response, 'close').then(() => undefined);
      pump();
      return;
    }
    case '/slow':
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.write('partial');
      // Never ends: the client's timeout must.
      slowBodyClosed = once(response, 'close').then(() => undefined);
      return;
    case '/to-elsewhere':
      redirect('http://elsewhere.test/secret');
      return;
    case '/to-localhost':
      redirect(`http://localhost:${port}/hello`);
      return;
    case '/to-other-name':
      redirect(`http://other.test:${port}/hello`, 307);
      return;
    case '/to-file':
      redirect('file:///etc/passwd');
      return;
    default:
      response.writeHead(500);
      response.end(`unexpected ${url.pathname}`);
  }
}

beforeAll(async () => {
  server = http.createServer(route);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  server.close();
  await once(server, 'close');
});

function context(signal = new AbortController().signal): ToolContext {
  return { tenantId: 't', workflowId: 'w', step: 'turn-1', callId: 'c1', signal };
}

function fetchTool(options: Partial<HttpFetchOptions> = {}): Tool {
  return createHttpFetchTool({
    allowedHosts: ['127.0.0.1'],
    allowPrivate: true,
    maxBytes: 1024 * 1024,
    timeoutMs: 5000,
    ...options,
  });
}

async function fetchWith(tool: Tool, url: string, method: 'GET' | 'HEAD' = 'GET') {
  return tool.execute(tool.parameters.parse({ url, method }), context());
}

describe('http_fetch', () => {
  it('is refused by default: 127.0.0.1 is loopback, even when allowlisted', async () => {
    seen.length = 0;
    const config = loadConfig({ HTTP_FETCH_ALLOWED_HOSTS: '127.0.0.1,localhost' });
    const tool = createToolRegistry(builtinTools(config)).get('http_fetch');
    if (!tool) throw new Error('http_fetch is not offered');
    expect(await fetchWith(tool, `http://127.0.0.1:${port}/hello`)).toEqual({
      content: 'Fetch refused: 127.0.0.1 is a loopback address, which tools may not reach.',
      isError: true,
    });
    const byName = await fetchWith(tool, `http://localhost:${port}/hello`);
    expect(byName.isError).toBe(true);
    expect(byName.content).toMatch(
      /^Fetch refused: localhost resolves to (127\.0\.0\.1|::1) is a loopback address/,
    );
    expect(seen).toEqual([]);
  });

  it('fetches an allowlisted host with HTTP_TOOLS_ALLOW_PRIVATE=true', async () => {
    const config = loadConfig({
      HTTP_FETCH_ALLOWED_HOSTS: '127.0.0.1',
      HTTP_TOOLS_ALLOW_PRIVATE: 'true',
    });
    const tool = createToolRegistry(builtinTools(config)).get('http_fetch');
    if (!tool) throw new Error('http_fetch is not offered');
    expect(await fetchWith(tool, `http://127.0.0.1:${port}/hello`)).toEqual({
      content: 'Status: 200 OK\nContent-Type: text/plain; charset=utf-8\n\nhello from the fixture',
    });
  });

  it('refuses a host that is not on the allowlist without resolving or connecting to it', async () => {
    const resolved: string[] = [];
    const tool = fetchTool({
      resolver: async (hostname) => {
        resolved.push(hostname);
        return [{ address: '127.0.0.1', family: 4 }];
      },
    });
    expect(await fetchWith(tool, `http://example.com:${port}/hello`)).toEqual({
      content: 'Fetch refused: example.com is not an allowed host (allowed: 127.0.0.1).',
      isError: true,
    });
    expect(resolved).toEqual([]);
  });

  it('refuses schemes other than http and https, and credentials in the URL', async () => {
    const tool = fetchTool();
    expect((await fetchWith(tool, 'file:///etc/passwd')).content).toBe(
      'Fetch refused: only http and https URLs can be fetched, not file:.',
    );
    expect((await fetchWith(tool, `http://user:pw@127.0.0.1:${port}/hello`)).content).toBe(
      'Fetch refused: URLs with a user name or password cannot be fetched.',
    );
    expect((await fetchWith(tool, 'not a url')).content).toBe(
      'Fetch refused: "not a url" is not a valid absolute URL.',
    );
  });

  it('connects to the address it checked, not to a second DNS answer', async () => {
    seen.length = 0;
    // fetch.test exists in no DNS: the request can only land through the pinned lookup.
    const tool = fetchTool({
      allowedHosts: ['fetch.test'],
      resolver: async () => [{ address: '127.0.0.1', family: 4 }],
    });
    const result = await fetchWith(tool, `http://fetch.test:${port}/hello`);
    expect(result.isError).toBeUndefined();
    expect(result.content).toContain('hello from the fixture');
    expect(seen).toEqual([{ path: '/hello', host: `fetch.test:${port}` }]);
  });

  it('refuses a hostname with one private address among public ones', async () => {
    const tool = fetchTool({
      allowedHosts: ['mixed.test'],
      allowPrivate: false,
      resolver: async () => [
        { address: '93.184.216.34', family: 4 },
        { address: '10.0.0.7', family: 4 },
      ],
    });
    expect((await fetchWith(tool, 'https://mixed.test/')).content).toBe(
      'Fetch refused: mixed.test resolves to 10.0.0.7 is a private address, which tools may not reach.',
    );
  });

  it('cuts a body over the size limit and says so, without downloading the rest', async () => {
    const tool = fetchTool({ maxBytes: 100_000 });
    const result = await fetchWith(tool, `http://127.0.0.1:${port}/big`);
    const [head, body = ''] = result.content.split('\n\n');
    expect(head).toBe('Status: 200 OK\nContent-Type: text/plain');
    expect(body).toBe(
      `${'a'.repeat(100_000)}\n[Truncated: the body is longer than 100000 bytes; the rest was not read.]`,
    );
    // The connection was closed early: the server stops long before its 4 MiB.
    await bigResponseClosed;
  });

  it('gives up after its timeout with an error result', async () => {
    const tool = fetchTool({ timeoutMs: 300 });
    const started = performance.now();
    expect(await fetchWith(tool, `http://127.0.0.1:${port}/slow`)).toEqual({
      content: 'Fetch failed: no complete response within 300 ms.',
      isError: true,
    });
    expect(performance.now() - started).toBeLessThan(2000);
    await slowBodyClosed;
  });

  it('a cancelled workflow aborts the fetch and the loop sees the abort, not a result', async () => {
    const tool = fetchTool();
    const controller = new AbortController();
    const pending = tool.execute(
      { url: `http://127.0.0.1:${port}/slow`, method: 'GET' },
      context(controller.signal),
    );
    setTimeout(() => controller.abort(new Error('workflow cancelled')), 100);
    await expect(pending).rejects.toThrow('workflow cancelled');
  });

  it('follows up to 3 redirects and names the final URL', async () => {
    const tool = fetchTool();
    expect(await fetchWith(tool, `http://127.0.0.1:${port}/chain/2`)).toEqual({
      content: `Status: 200 OK\nContent-Type: text/plain; charset=utf-8\nFinal URL: http://127.0.0.1:${port}/hello\n\nhello from the fixture`,
    });
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/chain/3`)).content).toBe(
      'Fetch refused: stopped after 3 redirects (the next was to /hello).',
    );
  });

  it('checks every redirect hop: host allowlist, scheme, and resolution', async () => {
    const resolved: string[] = [];
    const tool = fetchTool({
      allowedHosts: ['127.0.0.1', 'other.test'],
      resolver: async (hostname) => {
        resolved.push(hostname);
        return [{ address: '127.0.0.1', family: 4 }];
      },
    });
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/to-elsewhere`)).content).toBe(
      'Fetch refused: elsewhere.test is not an allowed host (allowed: 127.0.0.1, other.test).',
    );
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/to-localhost`)).content).toBe(
      'Fetch refused: localhost is not an allowed host (allowed: 127.0.0.1, other.test).',
    );
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/to-file`)).content).toBe(
      'Fetch refused: only http and https URLs can be fetched, not file:.',
    );
    const followed = await fetchWith(tool, `http://127.0.0.1:${port}/to-other-name`);
    expect(followed.content).toContain(`Final URL: http://other.test:${port}/hello`);
    expect(resolved).toEqual(['other.test']);
  });

  it('a redirect to a loopback name is refused when private addresses are not allowed', async () => {
    const tool = fetchTool({
      allowedHosts: ['public.test', 'other.test'],
      allowPrivate: false,
      resolver: async () => [{ address: '127.0.0.1', family: 4 }],
    });
    // Every name here resolves to loopback, so the first hop is refused before connecting.
    expect((await fetchWith(tool, `http://public.test:${port}/to-other-name`)).content).toBe(
      'Fetch refused: public.test resolves to 127.0.0.1 is a loopback address, which tools may not reach.',
    );
  });

  it('HEAD gives status and type only; other statuses and charsets come through as they are', async () => {
    const tool = fetchTool();
    expect(await fetchWith(tool, `http://127.0.0.1:${port}/hello`, 'HEAD')).toEqual({
      content: 'Status: 200 OK\nContent-Type: text/plain; charset=utf-8',
    });
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/not-found`)).content).toBe(
      'Status: 404 Not Found\nContent-Type: application/json\n\n{"error":"no such thing"}',
    );
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/latin1`)).content).toMatch(/\n\ncafé$/);
    expect((await fetchWith(tool, `http://127.0.0.1:${port}/binary`)).content).toBe(
      'Status: 200 OK\nContent-Type: image/png\n\n[Binary content (image/png), 8 bytes read; not shown.]',
    );
  });

  it('a refused connection is an error result', async () => {
    const closed = http.createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const closedPort = (closed.address() as AddressInfo).port;
    closed.close();
    await once(closed, 'close');
    const result = await fetchWith(fetchTool(), `http://127.0.0.1:${closedPort}/`);
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^Fetch failed: ECONNREFUSED/);
  });
});

describe('http_fetch timeouts', () => {
  it('a DNS answer that never comes is cut by the same timeout', async () => {
    const tool = createHttpFetchTool({
      allowedHosts: ['stuck.test'],
      allowPrivate: false,
      maxBytes: 1024,
      timeoutMs: 200,
      resolver: () => new Promise(() => {}),
    });
    expect(await fetchWith(tool, 'http://stuck.test/')).toEqual({
      content: 'Fetch failed: no complete response within 200 ms.',
      isError: true,
    });
  });
});
