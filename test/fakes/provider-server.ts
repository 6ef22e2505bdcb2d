import http, {
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { anthropicWire } from './anthropic-wire.js';
import { openaiWire } from './openai-wire.js';
import type {
  FakeApi,
  FakeCut,
  FakeErrorResponse,
  FakeProviderOptions,
  FakeProviderServer,
  FakeReply,
  FakeResponse,
  FakeStall,
  FakeStreamError,
  RecordedRequest,
} from './provider-types.js';
import { errorTypeForStatus, type Frame, type ReplyContext, type VendorWire } from './wire.js';

/**
 * A fake LLM provider for tests: plain `node:http` on 127.0.0.1 speaking the
 * OpenAI Chat Completions and Anthropic Messages wire formats, streamed
 * (when the body has `stream: true`) or not, answering each request with the
 * next scripted FakeResponse, faults included. The real SDKs are pointed at
 * it with `baseURL`; test/integration/fakes/provider-server.test.ts proves
 * they parse what it sends.
 */

export type {
  FakeApi,
  FakeCut,
  FakeErrorResponse,
  FakeErrorType,
  FakeFinishReason,
  FakeProviderOptions,
  FakeProviderServer,
  FakeReply,
  FakeReset,
  FakeResponse,
  FakeStall,
  FakeStreamError,
  FakeStreamErrorType,
  FakeToolCall,
  FakeUsage,
  RecordedRequest,
} from './provider-types.js';
export { DEFAULT_USAGE } from './wire.js';

const ROUTES: Record<string, FakeApi> = {
  '/v1/chat/completions': 'openai',
  '/v1/messages': 'anthropic',
};

const WIRES: Record<FakeApi, VendorWire> = { openai: openaiWire, anthropic: anthropicWire };

export const NO_RESPONSE_ENQUEUED = 'fake provider: no response enqueued';

const RESPONSE_CLOSED = 'the response closed';

/** One request's response in progress, and whether the client is still there. */
class Exchange {
  readonly #gone = new AbortController();
  /** Set when the fake drops the connection itself, which is no client abort. */
  #droppedByServer = false;

  constructor(
    readonly res: ServerResponse,
    onClientAbort: () => void,
  ) {
    res.on('close', () => {
      if (!res.writableFinished && !this.#droppedByServer) onClientAbort();
      // A reason of our own: abort() without one builds a DOMException with a stack, per response.
      this.#gone.abort(RESPONSE_CLOSED);
    });
  }

  get gone(): boolean {
    return this.#gone.signal.aborted;
  }

  dropConnection(): void {
    this.#droppedByServer = true;
    this.res.destroy();
  }

  /** Resolves once the data is flushed to the socket: true, or false when the client is gone. */
  write(text: string): Promise<boolean> {
    if (this.gone) return Promise.resolve(false);
    const signal = this.#gone.signal;
    return new Promise((resolve) => {
      const onGone = () => resolve(false);
      signal.addEventListener('abort', onGone, { once: true });
      this.res.write(text, (error) => {
        signal.removeEventListener('abort', onGone);
        resolve(!error);
      });
    });
  }

  /** Ends early when the client goes away, so no timer outlives the connection. */
  sleep(ms: number): Promise<void> {
    const signal = this.#gone.signal;
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    });
  }

  untilGone(): Promise<void> {
    const signal = this.#gone.signal;
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }
}

/** Everything needed to answer one recorded request. */
interface Answer {
  exchange: Exchange;
  wire: VendorWire;
  context: ReplyContext;
  /** The request body had `stream: true`. */
  streamed: boolean;
  requestId: string;
}

export async function startFakeProviderServer(
  options: FakeProviderOptions = {},
): Promise<FakeProviderServer> {
  const { respond: respondWhenEmpty, onAnswered, recordRequests = true } = options;
  const queue: FakeResponse[] = [];
  const requests: RecordedRequest[] = [];
  const waiters: Array<(request: RecordedRequest) => void> = [];
  const failures: unknown[] = [];
  let aborted = 0;
  let received = 0;
  let closing = false;

  async function answerRequest(
    req: IncomingMessage,
    exchange: Exchange,
    arrivedAt: number,
  ): Promise<void> {
    const path = req.url ?? '/';
    const api = req.method === 'POST' ? ROUTES[new URL(path, 'http://fake').pathname] : undefined;
    if (!api) {
      exchange.res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: `fake provider: no route for ${req.method} ${path}` }));
      return;
    }
    const rawBody = await readBody(req);
    if (rawBody === undefined) return;
    const body = parseBody(rawBody);
    const recorded: RecordedRequest = {
      api,
      path,
      headers: { ...req.headers },
      body,
      receivedAt: Date.now(),
    };
    received += 1;
    if (recordRequests) requests.push(recorded);
    for (const resolve of waiters.splice(0)) resolve(recorded);
    if (onAnswered) {
      exchange.res.once('finish', () =>
        onAnswered(recorded, { arrivedAt, endedAt: performance.now() }),
      );
    }

    const { model, streamed, includeUsage } = answerOptions(body);
    const answer: Answer = {
      exchange,
      wire: WIRES[api],
      context: { model, seq: received, includeUsage },
      streamed,
      requestId: `req_fake${received}`,
    };
    const response = queue.shift() ?? respondWhenEmpty?.(recorded);
    if (!response) {
      // x-should-retry: false stops SDK retries, so a forgotten enqueue fails at once and loudly.
      sendJson(answer, 500, answer.wire.errorBody('server', NO_RESPONSE_ENQUEUED), {
        'x-should-retry': 'false',
      });
      return;
    }
    await respond(answer, response);
  }

  const server = http.createServer((req, res) => {
    const arrivedAt = performance.now();
    const exchange = new Exchange(res, () => {
      if (!closing) aborted += 1;
    });
    answerRequest(req, exchange, arrivedAt).catch((error: unknown) => {
      failures.push(error);
      exchange.dropConnection();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  const url = `http://${address.includes(':') ? `[${address}]` : address}:${port}`;

  let closed: Promise<void> | undefined;
  async function closeServer(): Promise<void> {
    closing = true;
    await new Promise<void>((resolve, reject) => {
      server.close((error) => (error ? reject(error) : resolve()));
      server.closeAllConnections();
    });
    const [first] = failures;
    if (first !== undefined) {
      throw new AggregateError(
        failures,
        `fake provider: ${failures.length} answer(s) failed; first: ${String(first)}`,
      );
    }
  }

  return {
    url,
    openaiBaseUrl: `${url}/v1`,
    anthropicBaseUrl: url,
    enqueue: (...responses) => {
      for (const response of responses) assertDeliverable(response);
      queue.push(...responses);
    },
    requests,
    abortedRequests: () => aborted,
    nextRequest: () => new Promise((resolve) => waiters.push(resolve)),
    pendingResponses: () => queue.length,
    close: () => {
      closed ??= closeServer();
      return closed;
    },
  };
}

/** Undefined when the client went away mid-body; its exchange counts that abort when it closes. */
async function readBody(req: IncomingMessage): Promise<string | undefined> {
  const parts: Buffer[] = [];
  try {
    for await (const part of req) parts.push(part as Buffer);
  } catch {
    return undefined;
  }
  return Buffer.concat(parts).toString('utf8');
}

function parseBody(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** The few request fields an answer depends on; anything else in the body is only recorded. */
function answerOptions(body: unknown) {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as {
    model?: unknown;
    stream?: unknown;
    stream_options?: { include_usage?: unknown } | null;
  };
  return {
    model: typeof fields.model === 'string' ? fields.model : 'fake-model',
    streamed: fields.stream === true,
    includeUsage: fields.stream_options?.include_usage === true,
  };
}

async function respond(answer: Answer, response: FakeResponse): Promise<void> {
  switch (response.kind) {
    case 'reply':
      return sendReply(answer, response);
    case 'error':
      return sendError(answer, response);
    case 'stream-error':
      return sendStreamError(answer, response);
    case 'reset':
      return answer.exchange.dropConnection();
    case 'stall':
      return sendStall(answer, response);
    case 'cut':
      return sendCut(answer, response);
    default:
      return assertNever(response);
  }
}

function assertNever(value: never): never {
  throw new Error(`fake provider: unknown response ${JSON.stringify(value)}`);
}

async function sendReply(answer: Answer, reply: FakeReply): Promise<void> {
  const { exchange, wire, context } = answer;
  if (reply.firstByteDelayMs) await exchange.sleep(reply.firstByteDelayMs);
  if (exchange.gone) return;
  if (!answer.streamed) {
    sendJson(answer, 200, wire.replyBody(reply, context));
    return;
  }
  const frames = wire.replyFrames(reply, context);
  if (reply.delivery === 'burst') {
    assertDeliverable(reply);
    streamHeaders(answer).end(frames.map((frame) => frame.text).join(''));
    return;
  }
  openStream(answer);
  if (await writeFrames(exchange, frames, reply)) exchange.res.end();
}

/** A burst goes out in one write, so there is nothing to pace. */
function assertDeliverable(response: FakeResponse): void {
  if (response.kind !== 'reply' || response.delivery !== 'burst') return;
  if (response.chunkDelayMs !== undefined || response.betweenChunks) {
    throw new Error('fake provider: a burst reply cannot be paced');
  }
}

function sendError(answer: Answer, error: FakeErrorResponse): void {
  const body = error.body ?? answer.wire.errorBody(error.type ?? errorTypeForStatus(error.status));
  sendJson(answer, error.status, body, error.headers);
}

async function sendStreamError(answer: Answer, script: FakeStreamError): Promise<void> {
  const { exchange, wire, context } = answer;
  const type = script.type ?? 'overloaded';
  if (!answer.streamed) {
    sendJson(answer, wire.streamErrorStatus(type), wire.errorBody(type));
    return;
  }
  openStream(answer);
  if (!(await writeFrames(exchange, wire.partialFrames(script.afterChunks ?? [], context)))) return;
  if (await exchange.write(wire.streamErrorFrame(type))) exchange.res.end();
}

async function sendStall(answer: Answer, script: FakeStall): Promise<void> {
  const { exchange, wire, context } = answer;
  if (answer.streamed) {
    openStream(answer);
    await writeFrames(exchange, wire.partialFrames(script.afterChunks ?? [], context));
  } else {
    exchange.res.writeHead(200, jsonHeaders(answer)).flushHeaders();
  }
  await exchange.untilGone();
}

async function sendCut(answer: Answer, script: FakeCut): Promise<void> {
  const { exchange, wire, context } = answer;
  const chunks = script.afterChunks ?? [];
  if (answer.streamed) {
    openStream(answer);
    if (await writeFrames(exchange, wire.partialFrames(chunks, context))) exchange.res.end();
    return;
  }
  const json = JSON.stringify(wire.replyBody({ kind: 'reply', chunks }, context));
  exchange.res.writeHead(200, jsonHeaders(answer)).end(json.slice(0, Math.floor(json.length / 2)));
}

function jsonHeaders(answer: Answer): OutgoingHttpHeaders {
  return { 'content-type': 'application/json', [answer.wire.requestIdHeader]: answer.requestId };
}

/** A string body goes out as-is (an HTML error page from a proxy, say); anything else as JSON. */
function sendJson(
  answer: Answer,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (answer.exchange.gone) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const contentType = typeof body === 'string' ? 'text/plain' : 'application/json';
  answer.exchange.res
    .writeHead(status, { ...jsonHeaders(answer), 'content-type': contentType, ...headers })
    .end(text);
}

function openStream(answer: Answer): void {
  streamHeaders(answer).flushHeaders();
}

function streamHeaders(answer: Answer): ServerResponse {
  return answer.exchange.res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    [answer.wire.requestIdHeader]: answer.requestId,
  });
}

/**
 * Writes frames in order, pacing the content frames (text and tool-argument
 * deltas) as the reply asks. False once the client is gone.
 */
async function writeFrames(
  exchange: Exchange,
  frames: Frame[],
  pacing: Pick<FakeReply, 'chunkDelayMs' | 'betweenChunks'> = {},
): Promise<boolean> {
  const contentCount = frames.filter((frame) => frame.content).length;
  let sent = 0;
  for (const frame of frames) {
    if (!(await exchange.write(frame.text))) return false;
    if (!frame.content) continue;
    sent += 1;
    if (sent === contentCount) continue;
    await pacing.betweenChunks?.(sent - 1);
    if (pacing.chunkDelayMs) await exchange.sleep(pacing.chunkDelayMs);
  }
  return !exchange.gone;
}
