import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type {
  FakeCut,
  FakeErrorResponse,
  FakeReply,
  FakeResponse,
  FakeStall,
  FakeStreamError,
} from './provider-types.js';
import { errorTypeForStatus, type Frame, type ReplyContext, type VendorWire } from './wire.js';

/**
 * How the fake provider (provider-server.ts) answers one request: each
 * FakeResponse kind written on the response, in the vendor's wire format,
 * while the client is there.
 */

const RESPONSE_CLOSED = 'the response closed';

/** One request's response in progress, and whether the client is still there. */
export class Exchange {
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
  write(text: string | Uint8Array): Promise<boolean> {
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
export interface Answer {
  exchange: Exchange;
  wire: VendorWire;
  context: ReplyContext;
  /** The request body had `stream: true`. */
  streamed: boolean;
  requestId: string;
}

export async function respond(answer: Answer, response: FakeResponse): Promise<void> {
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
  if (await writeFrames(exchange, frames, reply, reply.onWire)) exchange.res.end();
}

/** A burst goes out in one write, so there is nothing to pace or split. */
export function assertDeliverable(response: FakeResponse): void {
  if (response.kind !== 'reply' || response.delivery !== 'burst') return;
  if (response.chunkDelayMs !== undefined || response.betweenChunks) {
    throw new Error('fake provider: a burst reply cannot be paced');
  }
  if (response.onWire) throw new Error('fake provider: a burst reply is written as it is');
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
  if (
    !(await writeFrames(
      exchange,
      wire.partialFrames(script.afterChunks ?? [], context, script.usage),
    ))
  )
    return;
  if (await exchange.write(wire.streamErrorFrame(type))) exchange.res.end();
}

async function sendStall(answer: Answer, script: FakeStall): Promise<void> {
  const { exchange, wire, context } = answer;
  if (answer.streamed) {
    openStream(answer);
    await writeFrames(
      exchange,
      wire.partialFrames(script.afterChunks ?? [], context, script.usage),
    );
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
    if (await writeFrames(exchange, wire.partialFrames(chunks, context, script.usage)))
      exchange.res.end();
    return;
  }
  const json = JSON.stringify(wire.replyBody({ kind: 'reply', chunks }, context));
  exchange.res.writeHead(200, jsonHeaders(answer)).end(json.slice(0, Math.floor(json.length / 2)));
}

function jsonHeaders(answer: Answer): OutgoingHttpHeaders {
  return { 'content-type': 'application/json', [answer.wire.requestIdHeader]: answer.requestId };
}

/** A string body goes out as-is (an HTML error page from a proxy, say); anything else as JSON. */
export function sendJson(
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
  onWire?: FakeReply['onWire'],
): Promise<boolean> {
  const contentCount = frames.filter((frame) => frame.content).length;
  let sent = 0;
  for (const frame of frames) {
    if (!(await writeFrame(exchange, frame.text, onWire))) return false;
    if (!frame.content) continue;
    sent += 1;
    if (sent === contentCount) continue;
    await pacing.betweenChunks?.(sent - 1);
    if (pacing.chunkDelayMs) await exchange.sleep(pacing.chunkDelayMs);
  }
  return !exchange.gone;
}

/** One frame, as FakeReply's `onWire` says when given. False once the client is gone. */
async function writeFrame(
  exchange: Exchange,
  text: string,
  onWire: FakeReply['onWire'],
): Promise<boolean> {
  if (!onWire) return exchange.write(text);
  const bytes = Buffer.from(`: a comment\n${text}`.replaceAll('\n', onWire.lineEnd));
  for (let start = 0; start < bytes.length; start += onWire.writeBytes) {
    if (!(await exchange.write(bytes.subarray(start, start + onWire.writeBytes)))) return false;
  }
  return true;
}
