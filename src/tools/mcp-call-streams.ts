import type { GuardedFetch } from './guarded-fetch.js';

/**
 * Tells a tool call that the event stream meant to carry its result ended
 * without it. The MCP SDK reads a `tools/call` answered as server-sent
 * events on its own and, when that stream breaks or ends early (the server
 * crashed, a proxy cut the connection), leaves the call waiting for the
 * server's whole timeout. Watching the stream here lets the call fail at
 * once, saying why.
 *
 * A call request is known by the id it sends in its `_meta`
 * (MCP_CALL_ID_META), unique to it: its idempotency key (which it sends
 * too, for tool authors) may repeat, when a model gives two calls of one
 * turn the same id. A stream that gave an event id is resumable: the SDK
 * reconnects to it with `Last-Event-ID`, so its end is not a loss.
 */

/** The `_meta` entry of a `tools/call` holding the call's idempotency key (workflow, step and call). */
export const MCP_CALL_KEY_META = 'waymark/idempotency-key';
/** The `_meta` entry of a `tools/call` holding the request's own id. */
export const MCP_CALL_ID_META = 'waymark/call-id';

export class McpCallStreams {
  readonly #listeners = new Map<string, () => void>();

  /** `fetch` that watches every event stream answering a `tools/call` that carries its id. */
  watch(fetch: GuardedFetch): GuardedFetch {
    return async (input, init) => {
      const response = await fetch(input, init);
      const callId = callIdOf(init);
      const body = response.body;
      const isEventStream = response.headers.get('content-type')?.includes('text/event-stream');
      if (callId === undefined || body === null || !response.ok || !isEventStream) {
        return response;
      }
      return new Response(this.#watched(body, callId), {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }

  /** Calls `lost` if the stream answering the call `callId` ends without being resumable; returns the unsubscribe. */
  onLost(callId: string, lost: () => void): () => void {
    this.#listeners.set(callId, lost);
    return () => {
      if (this.#listeners.get(callId) === lost) this.#listeners.delete(callId);
    };
  }

  #watched(body: ReadableStream<Uint8Array>, callId: string): ReadableStream<Uint8Array> {
    const reader = body.getReader();
    const ids = new EventIdScan();
    const ended = () => {
      if (ids.found) return;
      // After the SDK has parsed what came before the end (promise jobs): a result
      // in the stream's last bytes has settled its call first.
      setImmediate(() => this.#listeners.get(callId)?.());
    };
    return new ReadableStream<Uint8Array>({
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          ended();
          controller.error(error);
          return;
        }
        if (chunk.done) {
          ended();
          controller.close();
          return;
        }
        ids.scan(chunk.value);
        controller.enqueue(chunk.value);
      },
      cancel: (reason) => reader.cancel(reason),
    });
  }
}

/** The id of a `tools/call` request's body, if it is one that carries it. */
function callIdOf(init: RequestInit | undefined): string | undefined {
  const body = init?.body;
  if (init?.method !== 'POST' || typeof body !== 'string' || !body.includes(MCP_CALL_ID_META)) {
    return undefined;
  }
  const message = JSON.parse(body) as {
    method?: unknown;
    params?: { _meta?: Record<string, unknown> };
  };
  const callId = message.params?._meta?.[MCP_CALL_ID_META];
  return message.method === 'tools/call' && typeof callId === 'string' ? callId : undefined;
}

/**
 * Whether an event stream has given a non-empty event id (`id:` line), as
 * the SDK counts one, across chunk boundaries. Only the start of a line
 * matters, so of a line still open only its first characters are kept.
 */
class EventIdScan {
  found = false;
  readonly #decoder = new TextDecoder();
  #open = '';

  scan(bytes: Uint8Array): void {
    if (this.found) return;
    const lines = (this.#open + this.#decoder.decode(bytes, { stream: true })).split(/\r\n|\r|\n/);
    const open = lines.pop() ?? '';
    this.found = lines.some((line) => /^id: ?./.test(line));
    this.#open = open.slice(0, 8);
  }
}
