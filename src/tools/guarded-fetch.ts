import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import http from 'node:http';
import https from 'node:https';
import { pipeline, Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { untilAborted } from './guarded-request.js';
import { pinnedLookup, type Resolver, resolveCheckedAddresses } from './network-guard.js';

/**
 * A `fetch` through the network guard, for clients that take a fetch
 * (the MCP SDK's transport): each request resolves the hostname once,
 * checks every address and connects only to those (see network-guard.ts).
 * Unlike `guardedRequest`, the body is streamed: MCP answers with
 * server-sent events that stay open while a tool runs. Redirects are not
 * followed here; a caller that follows one calls this fetch again, so
 * every hop is checked.
 */

export interface GuardedFetchOptions {
  /** `HTTP_TOOLS_ALLOW_PRIVATE`. */
  allowPrivate: boolean;
  resolver?: Resolver;
  /** Bytes of one response body; the stream fails past them. */
  maxBytes: number;
}

export type GuardedFetch = (url: string | URL, init?: RequestInit) => Promise<Response>;

/** Statuses whose Response must have no body. */
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);

export function createGuardedFetch(options: GuardedFetchOptions): GuardedFetch {
  return async (input, init = {}) => {
    const url = new URL(input);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`only http and https URLs can be fetched, not ${url.protocol}`);
    }
    const signal = init.signal ?? new AbortController().signal;
    const addresses = await untilAborted(
      resolveCheckedAddresses(url.hostname, {
        allowPrivate: options.allowPrivate,
        resolver: options.resolver,
      }),
      signal,
    );
    const body = requestBody(init.body);
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
    const transport = url.protocol === 'https:' ? https : http;
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const request = transport.request(url, {
        method: init.method ?? 'GET',
        headers,
        signal,
        lookup: pinnedLookup(addresses),
        // A fresh connection per request: a pooled socket would skip the pinned lookup.
        agent: false,
      });
      request.once('response', resolve);
      // `on`, not `once`: a later socket error must not become an uncaught exception.
      request.on('error', reject);
      request.end(body);
    });
    const status = response.statusCode ?? 0;
    const hasBody = !NULL_BODY_STATUSES.has(status) && init.method !== 'HEAD';
    if (!hasBody) response.destroy();
    let stream: WebReadableStream | null = null;
    if (hasBody) {
      const limited = byteLimit(options.maxBytes);
      // pipeline destroys both sides on an error either way (abort, limit); the error
      // itself reaches the reader through `limited`, so the callback has nothing to add.
      pipeline(response, limited, () => undefined);
      stream = Readable.toWeb(limited) as WebReadableStream;
    }
    return new Response(stream as ReadableStream | null, {
      status,
      statusText: response.statusMessage ?? '',
      headers: toHeaders(response.headers),
    });
  };
}

function requestBody(body: RequestInit['body']): string | Buffer | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array) return Buffer.from(body);
  // The MCP transport only sends JSON strings; anything else is a programming error.
  throw new TypeError('the guarded fetch sends string or byte bodies only');
}

function toHeaders(incoming: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  return headers;
}

/** Fails the stream once more than `maxBytes` went through, which closes the connection. */
function byteLimit(maxBytes: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      seen += chunk.length;
      if (seen > maxBytes) callback(new Error(`response larger than ${maxBytes} bytes`));
      else callback(null, chunk);
    },
  });
}
