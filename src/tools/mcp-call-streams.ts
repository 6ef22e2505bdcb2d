import type { GuardedFetch } from './guarded-fetch.js';

/**
 * Tells a tool call that the event stream meant to carry its result ended
 * without it. The MCP SDK reads a `tools/call` answered as server-sent
 * events on its own and, when that stream breaks or ends early (the server
 * crashed, a proxy cut the connection), leaves the call waiting for the
 * server's whole timeout. Watching the stream here lets the call fail at
 * once, saying why.
 *
 * A call is known by its idempotency key, which it sends in its `_meta`
 * (MCP_CALL_KEY_META); tool authors can use it as HTTP tools use their
 * `Idempotency-Key` header. A stream that gave an event id is resumable:
 * the SDK reconnects to it with `Last-Event-ID`, so its end is not a loss.
 */

/** The `_meta` entry of a `tools/call` holding the call's idempotency key. */
export const MCP_CALL_KEY_META = 'waymark/idempotency-key';

export class McpCallStreams {
  readonly #listeners = new Map<string, Set<() => void>>();

  /** `fetch` that watches every event stream answering a keyed `tools/call`. */
  watch(fetch: GuardedFetch): GuardedFetch {
    return async (input, init) => {
      const response = await fetch(input, init);
      const key = callKey(init);
      const body = response.body;
      const isEventStream = response.headers.get('content-type')?.includes('text/event-stream');
      if (key === undefined || body === null || !response.ok || !isEventStream) return response;
      return new Response(this.#watched(body, key), {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }

  /** Calls `lost` if the stream answering the call `key` ends without being resumable; returns the unsubscribe. */
  onLost(key: string, lost: () => void): () => void {
    const listeners = this.#listeners.get(key) ?? new Set();
    listeners.add(lost);
    this.#listeners.set(key, listeners);
    return () => {
      listeners.delete(lost);
      if (listeners.size === 0 && this.#listeners.get(key) === listeners) {
        this.#listeners.delete(key);
      }
    };
  }

  #watched(body: ReadableStream<Uint8Array>, key: string): ReadableStream<Uint8Array> {
    const reader = body.getReader();
    const ids = new EventIdScan();
    const ended = () => {
      if (ids.found) return;
      // After the SDK has parsed what came before the end (promise jobs): a result
      // in the stream's last bytes has settled its call first.
      setImmediate(() => {
        for (const lost of this.#listeners.get(key) ?? []) lost();
      });
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

/** The idempotency key of a `tools/call` request's body, if it is one. */
function callKey(init: RequestInit | undefined): string | undefined {
  const body = init?.body;
  if (init?.method !== 'POST' || typeof body !== 'string' || !body.includes(MCP_CALL_KEY_META)) {
    return undefined;
  }
  const message = JSON.parse(body) as {
    method?: unknown;
    params?: { _meta?: Record<string, unknown> };
  };
  const key = message.params?._meta?.[MCP_CALL_KEY_META];
  return message.method === 'tools/call' && typeof key === 'string' ? key : undefined;
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
