import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { anthropicWire } from './anthropic-wire.js';
import { openaiWire } from './openai-wire.js';
import {
  type Answer,
  assertDeliverable,
  Exchange,
  respond,
  sendJson,
} from './provider-responses.js';
import type {
  FakeApi,
  FakeProviderOptions,
  FakeProviderServer,
  FakeResponse,
  RecordedRequest,
} from './provider-types.js';
import type { VendorWire } from './wire.js';

/**
 * A fake LLM provider for tests: plain `node:http` on 127.0.0.1 speaking the
 * OpenAI Chat Completions and Anthropic Messages wire formats, streamed
 * (when the body has `stream: true`) or not, answering each request with the
 * next scripted FakeResponse, faults included. The real SDKs are pointed at
 * it with `baseURL`; test/integration/fakes/provider-server*.test.ts prove
 * they parse what it sends. How each response is written is
 * provider-responses.ts.
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
    const refusal = answer.wire.refusal(body);
    if (refusal !== undefined) {
      // Refused before any answer, as the vendor does: the queued response waits for the next request.
      sendJson(answer, 400, answer.wire.errorBody('invalid_request', refusal), {
        'x-should-retry': 'false',
      });
      return;
    }
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
