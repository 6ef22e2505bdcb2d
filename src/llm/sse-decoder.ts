/**
 * The events of a provider's `text/event-stream` response body, decoded as
 * the HTML standard's event-stream interpretation says: UTF-8 (a leading
 * BOM dropped), lines ended by CRLF, LF or CR (also when a CRLF is split
 * between two chunks), `:` comments skipped, a field without a colon
 * taken as having an empty value, one space after the colon dropped, the
 * `data` lines of an event joined with LF, an event dispatched at a blank
 * line when it has data. The body's end completes nothing: an event it
 * ends inside of is discarded, so a decoder needs no call at the end.
 * `id` and `retry` mean nothing to a client that never reconnects and are
 * skipped.
 *
 * Why not the OpenAI SDK's stream (the OpenAI adapter reads the SDK's raw
 * response with this decoder; the Anthropic adapter keeps its SDK's stream,
 * anthropic/stream-turn.ts says why): it decodes through three nested
 * async generators, copying the bytes received so far into a new array at
 * every chunk. Read through it, each streamed call left ~12 KB that
 * outlived V8's young-generation collections and was promoted to the old
 * generation, to be freed only by a full collection.
 * Measured (2026-12-05, one process calling a local server in a loop, a
 * three-chunk answer, `--trace-gc-nvp`): through the OpenAI SDK's stream,
 * 1.32-1.33 MB promoted at every scavenge, each pausing 2.6-4.7 ms, and
 * 0.43 ms a call; the SDK's raw response read through this decoder,
 * 0.14 MB promoted (as much as a call that does not stream), pauses of
 * 0.7-0.9 ms, and 0.37 ms a call. This decoder is synchronous: the
 * adapter feeds it the body's chunks in its own loop, so an event crosses
 * no async generator of its own on its way out.
 */
export interface SseEvent {
  /** The `event` field; null when the event had none (a browser would call it `message`). */
  event: string | null;
  data: string;
}

export class SseDecoder {
  readonly #text = new TextDecoder('utf-8');
  /** The text of a line not yet ended. */
  #line = '';
  /** The last chunk ended with CR: an LF starting the next one ends no second line. */
  #afterCr = false;
  #event = '';
  #data: string[] = [];

  /** The events that `chunk` (the next bytes of the body) completes, in order. */
  push(chunk: Uint8Array): SseEvent[] {
    return this.#lines(this.#text.decode(chunk, { stream: true }));
  }

  #lines(text: string): SseEvent[] {
    // Bytes that end inside a character decode to nothing yet: a CR before them stays pending.
    if (text === '') return [];
    const events: SseEvent[] = [];
    let start = 0;
    if (this.#afterCr && text.startsWith('\n')) start = 1;
    this.#afterCr = false;
    for (let index = start; index < text.length; index++) {
      const char = text.charCodeAt(index);
      if (char !== LF && char !== CR) continue;
      const event = this.#field(this.#line + text.slice(start, index));
      this.#line = '';
      if (event) events.push(event);
      if (char === CR) {
        if (index + 1 === text.length) this.#afterCr = true;
        else if (text.charCodeAt(index + 1) === LF) index += 1;
      }
      start = index + 1;
    }
    this.#line += text.slice(start);
    return events;
  }

  /** One whole line: a field of the event being read, or the blank line that dispatches it. */
  #field(line: string): SseEvent | undefined {
    if (line === '') return this.#dispatch();
    if (line.charCodeAt(0) === COLON) return undefined;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === SPACE) value = value.slice(1);
    if (name === 'data') this.#data.push(value);
    else if (name === 'event') this.#event = value;
    return undefined;
  }

  #dispatch(): SseEvent | undefined {
    const data = this.#data;
    const event = this.#event;
    this.#data = [];
    this.#event = '';
    if (data.length === 0) return undefined;
    return { event: event === '' ? null : event, data: data.join('\n') };
  }
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
