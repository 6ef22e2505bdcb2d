import { describe, expect, it } from 'vitest';
import { SseDecoder, type SseEvent } from '../../../src/llm/sse-decoder.js';

const bytes = (text: string) => new TextEncoder().encode(text);

/** Every event of `chunks`, fed to one decoder in that order. */
function decode(chunks: Uint8Array[]): SseEvent[] {
  const decoder = new SseDecoder();
  return chunks.flatMap((chunk) => decoder.push(chunk));
}

/** `text` cut into pieces of `size` bytes: a character or a line end may be split. */
function piecesOf(text: string, size: number): Uint8Array[] {
  const all = bytes(text);
  const pieces: Uint8Array[] = [];
  for (let start = 0; start < all.length; start += size)
    pieces.push(all.subarray(start, start + size));
  return pieces;
}

describe('SseDecoder', () => {
  it('reads data events, with their names when they have one', () => {
    expect(
      decode([bytes('data: {"a":1}\n\nevent: message_start\ndata: {"b":2}\n\ndata: [DONE]\n\n')]),
    ).toEqual([
      { event: null, data: '{"a":1}' },
      { event: 'message_start', data: '{"b":2}' },
      { event: null, data: '[DONE]' },
    ]);
  });

  it('reads the same events whatever the line ends and however the bytes are cut', () => {
    const events = [
      { event: 'delta', data: 'héllo wörld ✓ 🎉' },
      { event: null, data: 'line one\nline two' },
      { event: null, data: '' },
    ];
    const body = (end: string) =>
      [
        `event: delta${end}data: héllo wörld ✓ 🎉${end}${end}`,
        `data: line one${end}data: line two${end}${end}`,
        `data${end}${end}`,
      ].join('');
    for (const end of ['\n', '\r\n', '\r']) {
      expect(decode([bytes(body(end))]), JSON.stringify(end)).toEqual(events);
      // One byte at a time splits every CRLF and every multi-byte character.
      for (const size of [1, 2, 3, 5, 7]) {
        expect(decode(piecesOf(body(end), size)), `${JSON.stringify(end)} by ${size}`).toEqual(
          events,
        );
      }
    }
  });

  it('keeps a CR pending across an empty chunk, so that its LF ends no second line', () => {
    expect(decode([bytes('data: a\r'), new Uint8Array(0), bytes('\ndata: b\r\n\r\n')])).toEqual([
      { event: null, data: 'a\nb' },
    ]);
  });

  it('skips comments, id, retry and unknown fields; keeps a value without the space', () => {
    expect(
      decode([bytes(': keep-alive\nid: 7\nretry: 100\nfoo: bar\ndata:x\ndata:  y\n\n')]),
    ).toEqual([{ event: null, data: 'x\n y' }]);
  });

  it('dispatches nothing for a blank line without data, and forgets a name it had', () => {
    expect(decode([bytes('event: ping\n\n\n\ndata: after\n\n')])).toEqual([
      { event: null, data: 'after' },
    ]);
  });

  it('drops a byte order mark at the start, and only there', () => {
    expect(decode([new Uint8Array([0xef, 0xbb, 0xbf]), bytes('data: \uFEFFx\n\n')])).toEqual([
      { event: null, data: '\uFEFFx' },
    ]);
  });

  it('holds an event until its blank line, and never dispatches one the body ends inside of', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('data: a\n'))).toEqual([]);
    expect(decoder.push(bytes('\ndata: b\n'))).toEqual([{ event: null, data: 'a' }]);
    expect(decoder.push(bytes('data: c'))).toEqual([]);
  });
});
