import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import http from 'node:http';
import https from 'node:https';
import { pipeline, type Readable, type Transform } from 'node:stream';
import zlib from 'node:zlib';
import { pinnedLookup, type Resolver, resolveCheckedAddresses } from './network-guard.js';
import { ToolFailure } from './types.js';

/**
 * One HTTP request of a network tool, through the network guard: the
 * hostname is resolved once, every address checked, and the connection
 * pinned to the checked addresses; the response body is read up to a byte
 * limit and the rest is never downloaded. Redirects are not followed: each
 * hop is a new guarded request, decided by the caller.
 */

export interface GuardedRequestOptions {
  method: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Aborts the request and the body read (cancel, timeout). */
  signal: AbortSignal;
  /** Bytes of body kept; the connection is closed past them. */
  maxBytes: number;
  /** `HTTP_TOOLS_ALLOW_PRIVATE`. */
  allowPrivate: boolean;
  resolver?: Resolver;
  /** Whether to read the body of this response at all (a redirect's body is not worth it). */
  wantBody?: (status: number, headers: IncomingHttpHeaders) => boolean;
}

export interface GuardedResponse {
  status: number;
  statusText: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The body was longer than `maxBytes` and cut there. */
  truncated: boolean;
  /** The checked address the connection went to. */
  remoteAddress: string | undefined;
}

export async function guardedRequest(
  url: URL,
  options: GuardedRequestOptions,
): Promise<GuardedResponse> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ToolFailure(`only http and https URLs can be fetched, not ${url.protocol}`);
  }
  // getaddrinfo cannot be cancelled; stop waiting for it at least.
  const addresses = await untilAborted(
    resolveCheckedAddresses(url.hostname, {
      allowPrivate: options.allowPrivate,
      resolver: options.resolver,
    }),
    options.signal,
  );
  const transport = url.protocol === 'https:' ? https : http;
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    const request = transport.request(url, {
      method: options.method,
      headers: options.headers,
      signal: options.signal,
      lookup: pinnedLookup(addresses),
      // A fresh connection per request: a pooled socket would skip the pinned lookup.
      agent: false,
    });
    request.once('response', resolve);
    // `on`, not `once`: a later socket error must not become an uncaught exception.
    request.on('error', reject);
    request.end(options.body);
  });
  const remoteAddress = response.socket?.remoteAddress;
  const wanted = options.wantBody?.(response.statusCode ?? 0, response.headers) ?? true;
  const { body, truncated } = wanted
    ? await readLimited(response, options.maxBytes)
    : discard(response);
  return {
    status: response.statusCode ?? 0,
    statusText: response.statusMessage ?? '',
    headers: response.headers,
    body,
    truncated,
    remoteAddress,
  };
}

async function readLimited(
  response: IncomingMessage,
  maxBytes: number,
): Promise<{ body: Buffer; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  // Leaving the loop early (past the limit) destroys the stream, the response and its socket.
  for await (const chunk of decoded(response) as AsyncIterable<Buffer>) {
    const room = maxBytes - size;
    if (chunk.length > room) {
      chunks.push(chunk.subarray(0, room));
      return { body: Buffer.concat(chunks), truncated: true };
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  return { body: Buffer.concat(chunks), truncated: false };
}

/**
 * The body as its server meant it. Waymark asks for no encoding, but some
 * servers compress anyway: read as text, their bytes reached the model as
 * noise. The byte limit counts decoded bytes, so a small compressed body
 * that expands without end is cut like a long one.
 */
function decoded(response: IncomingMessage): Readable {
  const encoding = (response.headers['content-encoding'] ?? '').trim().toLowerCase();
  const decoder = DECODERS[encoding];
  if (encoding === '' || encoding === 'identity') return response;
  if (!decoder) {
    response.destroy();
    throw new ToolFailure(`the answer is encoded as "${encoding}", which is not decoded`);
  }
  const stream = decoder();
  // An error on either side (a corrupt body, a reset) ends the other and reaches the reader.
  pipeline(response, stream, () => undefined);
  return stream;
}

const DECODERS: Record<string, () => Transform> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
};

function discard(response: IncomingMessage): { body: Buffer; truncated: boolean } {
  response.destroy();
  return { body: Buffer.alloc(0), truncated: false };
}

export function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** An answer's body as text, in the charset its Content-Type declares (UTF-8 when none, or one unknown). */
export function decodeText(body: Buffer, contentType: string | undefined): string {
  const charset = /;\s*charset="?([^";\s]+)/i.exec(contentType ?? '')?.[1];
  try {
    return new TextDecoder(charset ?? 'utf-8').decode(body);
  } catch (error) {
    // An unknown charset label; UTF-8 is the best guess on today's web.
    if (error instanceof RangeError) return new TextDecoder('utf-8').decode(body);
    throw error;
  }
}
