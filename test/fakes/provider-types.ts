/**
 * The scripting vocabulary of the fake model provider (see provider-server.ts).
 * A test enqueues one FakeResponse per expected model call; the server
 * answers each request with the next one, in the wire format of the API the
 * request came in on.
 */

export interface FakeToolCall {
  /** Defaults to a unique `call_fake…` (OpenAI) or `toolu_fake…` (Anthropic) id. */
  id?: string;
  name: string;
  /** A string is raw JSON text sent as-is (it may be malformed); an object is serialised. */
  arguments: string | Record<string, unknown>;
}

/**
 * Token counts, put on the wire verbatim: `input` becomes OpenAI's
 * `prompt_tokens` (which counts cached tokens too) and Anthropic's
 * `input_tokens` (which does not), so pick numbers in the vendor's sense.
 * OpenAI has no field for `cacheWrite`; it is ignored there.
 */
export interface FakeUsage {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
}

export type FakeFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

export type FakeErrorType =
  | 'rate_limit'
  | 'overloaded'
  | 'server'
  | 'context_length'
  | 'invalid_request'
  | 'authentication';

export type FakeStreamErrorType = 'overloaded' | 'server';

export interface FakeReply {
  kind: 'reply';
  /** Streamed as a few word-sized chunks unless `chunks` is given. */
  text?: string;
  /** The exact text deltas to stream; when given, they also make the non-streamed text. */
  chunks?: string[];
  /** Sent after the text; streamed one call after the other, arguments split over several deltas. */
  toolCalls?: FakeToolCall[];
  /** Defaults to DEFAULT_USAGE. */
  usage?: FakeUsage;
  /** Defaults to `tool_calls` when there are tool calls, else `stop`. */
  finish?: FakeFinishReason;
  /** Delay between streamed chunks (text deltas and tool-argument deltas alike). */
  chunkDelayMs?: number;
  /**
   * Awaited after chunk `sentIndex` is written (and flushed) and before the
   * next one. Chunks are the text deltas then the tool-argument deltas,
   * numbered from 0; it is not called after the last chunk.
   */
  betweenChunks?: (sentIndex: number) => Promise<void>;
  /** Delay before sending response headers. */
  firstByteDelayMs?: number;
  /**
   * How a streamed reply reaches the socket. `frames` (the default) writes
   * each SSE frame on its own and waits for it to flush, as a model
   * generating tokens does; `burst` writes the headers and every frame in
   * one write, as a provider answering at once from a cache does. A burst
   * has no pacing: `chunkDelayMs` and `betweenChunks` are refused with it.
   */
  delivery?: 'frames' | 'burst';
  /**
   * How `frames` delivery puts the frames' bytes on the wire, as some
   * compatible servers and proxies do: every line ended by `lineEnd`
   * rather than LF, a `: comment` line before each frame, and the bytes
   * written `writeBytes` at a time (each write flushed before the next),
   * so that line ends and characters are split between reads.
   */
  onWire?: { lineEnd: '\r\n' | '\r'; writeBytes: number };
}

export interface FakeErrorResponse {
  kind: 'error';
  status: number;
  /** Picks the vendor's error body; derived from `status` when omitted (429 → rate_limit, 529 → overloaded, …). */
  type?: FakeErrorType;
  /** e.g. `retry-after`, `retry-after-ms`, `x-should-retry`. */
  headers?: Record<string, string>;
  /**
   * Overrides the default vendor error body for that type. A string goes out
   * as-is with `text/plain` (an HTML page from a proxy, say); anything else
   * as JSON.
   */
  body?: unknown;
}

/**
 * An HTTP 200 SSE stream that sends some text, then an error: Anthropic an
 * `event: error` frame, OpenAI a `data: {"error":{…}}` chunk. Defaults to
 * `overloaded`. A request that did not ask to stream gets the same error as
 * an HTTP error instead (OpenAI 503/500, Anthropic 529/500).
 */
export interface FakeStreamError {
  kind: 'stream-error';
  afterChunks?: string[];
  type?: FakeStreamErrorType;
  /**
   * What the stream's opening reports, as the vendor's does: Anthropic's
   * `message_start` the input side (and at most one output token),
   * DEFAULT_USAGE's unless given. OpenAI reports usage only in its last
   * chunk, which a stream cut short never sends.
   */
  usage?: FakeUsage;
}

/** Destroys the socket without any response. */
export interface FakeReset {
  kind: 'reset';
}

/**
 * Headers and `afterChunks`, then nothing until the client goes away. A
 * request that did not ask to stream gets only the headers.
 */
export interface FakeStall {
  kind: 'stall';
  afterChunks?: string[];
  /** What the stream's opening reports (see FakeStreamError's `usage`). */
  usage?: FakeUsage;
}

/**
 * Headers and `afterChunks`, then the response ends cleanly at the HTTP level
 * but without the vendor's terminator (no `[DONE]`, no `message_stop`). A
 * request that did not ask to stream gets the first half of the JSON body.
 */
export interface FakeCut {
  kind: 'cut';
  afterChunks?: string[];
  /** What the stream's opening reports (see FakeStreamError's `usage`). */
  usage?: FakeUsage;
}

export type FakeResponse =
  | FakeReply
  | FakeErrorResponse
  | FakeStreamError
  | FakeReset
  | FakeStall
  | FakeCut;

export type FakeApi = 'openai' | 'anthropic';

export interface RecordedRequest {
  api: FakeApi;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /**
   * The request body as the client sent it: parsed JSON, or the raw text when
   * it is not JSON. Typed `any` on purpose: tests reach into vendor-specific
   * fields (`messages`, `tools`, `stream_options`, `system`, …) of two
   * different APIs, and the assertions themselves are the type check.
   */
  // biome-ignore lint/suspicious/noExplicitAny: see the comment above.
  body: any;
  /** `Date.now()` when the body had been read. */
  receivedAt: number;
}

/** How the fake is started; tests need none of it, benchmarks do. */
export interface FakeProviderOptions {
  /**
   * Answers a request when nothing is enqueued: a script of many concurrent
   * conversations, where a FIFO queue cannot know which one asks next.
   * Without it, a request finding the queue empty gets a 500.
   */
  respond?: (request: RecordedRequest) => FakeResponse;
  /**
   * Called when a response has been written to the socket, with
   * `performance.now()` times from the request's arrival (before its body
   * was read) to that moment: the time spent inside the fake.
   */
  onAnswered?: (request: RecordedRequest, span: { arrivedAt: number; endedAt: number }) => void;
  /** Keep every request in `requests` (the default); long benchmarks turn it off to bound memory. */
  recordRequests?: boolean;
  /** 0 (the default) picks a free port; a fixed one gives a URL to configure a separately started service with. */
  port?: number;
  /** Interface to listen on; 127.0.0.1 unless set. */
  host?: string;
}

export interface FakeProviderServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** `${url}/v1` (what `new OpenAI({ baseURL })` wants) */
  openaiBaseUrl: string;
  /** `${url}` (what `new Anthropic({ baseURL })` wants) */
  anthropicBaseUrl: string;
  /** FIFO queue shared by both APIs, one response consumed per request. */
  enqueue(...responses: FakeResponse[]): void;
  /** Every request to a known route, in arrival order (a live array; empty with `recordRequests: false`). */
  requests: RecordedRequest[];
  /** Number of requests whose client went away before the response finished (for cancel tests). */
  abortedRequests(): number;
  /** Resolves when a request arrives (counting from the call), for tests that need to act mid-request. */
  nextRequest(): Promise<RecordedRequest>;
  /** Enqueued responses no request has consumed yet. */
  pendingResponses(): number;
  /**
   * Closes every socket, even stalled ones. Rejects afterwards if the fake
   * itself failed while answering (e.g. a `betweenChunks` hook threw), so a
   * broken script cannot pass unnoticed.
   */
  close(): Promise<void>;
}
