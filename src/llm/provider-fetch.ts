import http from 'node:http';
import https from 'node:https';
import { pipeline, type Readable } from 'node:stream';
import zlib from 'node:zlib';

/**
 * How both SDK clients reach their providers: the `fetch` they are given
 * (an option both SDKs document), on node:http and node:https with
 * keep-alive agents of its own.
 *
 * Why not Node's own fetch: undici's fetch with its web streams (request
 * and header objects, the body copied into web streams, a promise per chunk
 * read) cost the service's thread ~0.15 ms of CPU per model call. bench
 * simple-path, 4 alternated pairs on 2026-12-01, at concurrency 32: the
 * service thread 2.07-2.27 ms per workflow against 2.54-2.99 with Node's
 * fetch, and 350-388 workflows/s against 280-334. The SDKs read a response
 * body that is an async iterable as it is (their ReadableStream shims), so
 * the body here is the node:http response itself.
 *
 * What it does as a provider client needs, and no more:
 *  - redirects are refused, never followed: a model API answers where it
 *    is asked, and every request carries the API key and the prompt, so a
 *    redirect is a misconfigured base URL (`isRefusedRedirect`);
 *  - a compressed body (gzip, deflate, br) is decoded, though none is asked
 *    for;
 *  - the caller's signal aborts the request and a body being read, with an
 *    `AbortError` as fetch's;
 *  - idle sockets close after `IDLE_SOCKET_MS`, or sooner when the server's
 *    Keep-Alive header says so (Node's agent reads it).
 * A body is text or bytes: the SDKs send JSON.
 */
export interface ProviderFetch {
  fetch: typeof fetch;
  /** Closes the idle sockets (the process is stopping). */
  close(): void;
}

/** As undici's default keep-alive timeout: servers commonly close idle connections after 5 s. */
const IDLE_SOCKET_MS = 4_000;

export function createProviderFetch(): ProviderFetch {
  const agents = {
    http: new http.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS }),
    https: new https.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS }),
  };
  const providerFetch = (input: string | URL, init: RequestInit = {}) =>
    send(new URL(String(input)), init, agents);
  return {
    // The SDKs call it as fetch; its response is the subset of Response they read.
    fetch: providerFetch as unknown as typeof fetch,
    close() {
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}

/** What a refused redirect is reported as (an `invalid_request`: retrying cannot help). */
export const REFUSED_REDIRECT_DETAIL =
  'the provider answered with a redirect, which is not followed: check its base URL';

/** The rejection of a provider request answered with a redirect. */
export class RefusedRedirect extends Error {
  constructor(readonly status: number) {
    super(`the provider answered ${status} (a redirect), which is not followed`);
    this.name = 'RefusedRedirect';
  }
}

/** Whether an SDK connection error is a refused redirect, which the SDKs wrap once or twice. */
export function isRefusedRedirect(error: unknown): boolean {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && cause instanceof Error; depth++) {
    if (cause instanceof RefusedRedirect) return true;
    cause = cause.cause;
  }
  return false;
}

function send(
  url: URL,
  init: RequestInit,
  agents: { http: http.Agent; https: https.Agent },
): Promise<ProviderResponse> {
  const signal = init.signal ?? undefined;
  if (signal?.aborted) return Promise.reject(abortError(signal));
  const body = requestBody(init.body);
  const headers = headerRecord(init.headers);
  if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
  const secure = url.protocol === 'https:';
  return new Promise<ProviderResponse>((resolve, reject) => {
    const request = (secure ? https : http).request(url, {
      method: (init.method ?? 'GET').toUpperCase(),
      headers,
      agent: secure ? agents.https : agents.http,
    });
    let response: ProviderResponse | undefined;
    const onAbort = () => {
      const error = abortError(signal);
      request.destroy(error);
      response?.body.destroy(error);
      reject(error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const release = () => signal?.removeEventListener('abort', onAbort);
    // `on`, not `once`: a second failure (the socket after an abort) must find a listener too.
    request.on('error', (error) => {
      release();
      reject(error);
    });
    request.once('response', (message) => {
      const status = message.statusCode ?? 0;
      if (status >= 300 && status < 400) {
        message.destroy();
        release();
        reject(new RefusedRedirect(status));
        return;
      }
      response = new ProviderResponse(message, url.href);
      response.body.once('close', release);
      // A reader sees a failure through its own iteration; this keeps a body
      // nobody reads (its reader gone) from failing the process when its socket closes.
      response.body.on('error', () => {});
      resolve(response);
    });
    request.end(body);
  });
}

/**
 * The body of a response that a provider fetch answered (an SDK's raw
 * response, `asResponse()`), as the Node stream it is, for an adapter that
 * decodes it itself (openai/stream-turn.ts); `destroy()` ends a read of
 * it. Any other response is a programming error: every SDK client is given
 * a provider fetch.
 */
export function providerBody(response: Response): Readable {
  if (response instanceof ProviderResponse) return response.body;
  throw new TypeError('not a response of a provider fetch (createProviderFetch)');
}

/**
 * The part of fetch's Response the SDKs read. `body` is a Node stream (an
 * async iterable of byte chunks), not a web ReadableStream.
 */
class ProviderResponse {
  readonly ok: boolean;
  readonly status: number;
  readonly statusText: string;
  readonly headers: Headers;
  readonly url: string;
  readonly redirected = false;
  readonly body: Readable;

  constructor(message: http.IncomingMessage, url: string) {
    this.status = message.statusCode ?? 0;
    this.ok = this.status >= 200 && this.status < 300;
    this.statusText = message.statusMessage ?? '';
    this.url = url;
    const headers = new Headers();
    const raw = message.rawHeaders;
    for (let index = 0; index + 1 < raw.length; index += 2) {
      headers.append(raw[index] as string, raw[index + 1] as string);
    }
    this.headers = headers;
    this.body = decoded(message);
  }

  async text(): Promise<string> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }
}

/** The body as sent, or decoded when the server compressed it anyway. */
function decoded(message: http.IncomingMessage): Readable {
  const encoding = message.headers['content-encoding']?.trim().toLowerCase();
  const decoder =
    encoding === 'gzip' || encoding === 'x-gzip'
      ? zlib.createGunzip()
      : encoding === 'deflate'
        ? zlib.createInflate()
        : encoding === 'br'
          ? zlib.createBrotliDecompress()
          : undefined;
  if (!decoder) return message;
  // Either side failing destroys the other; the reader sees the error on the decoder.
  pipeline(message, decoder, () => {});
  return decoder;
}

function requestBody(body: RequestInit['body']): string | Uint8Array | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) return body;
  throw new TypeError('a provider request body is text or bytes');
}

function headerRecord(init: RequestInit['headers']): Record<string, string> {
  const record: Record<string, string> = {};
  if (!init) return record;
  if (init instanceof Headers) {
    init.forEach((value, name) => {
      record[name] = value;
    });
  } else {
    const pairs = Array.isArray(init) ? init : Object.entries(init);
    for (const [name, value] of pairs) {
      record[name.toLowerCase()] = typeof value === 'string' ? value : value.join(', ');
    }
  }
  return record;
}

/** fetch's rejection when its signal aborts: an `AbortError`, whose cause is the signal's reason. */
function abortError(signal: AbortSignal | undefined): DOMException {
  const error = new DOMException('This operation was aborted', 'AbortError');
  if (signal?.reason !== undefined) Object.defineProperty(error, 'cause', { value: signal.reason });
  return error;
}
