import { describe, expect, it } from 'vitest';
import {
  findUnsupportedJson,
  MAX_JSON_DEPTH,
  storableText,
  withoutNul,
} from '../../src/json-limits.js';

function parsed(text: string) {
  return findUnsupportedJson(JSON.parse(text), text);
}

describe('findUnsupportedJson', () => {
  it('counts the value itself as level 1: MAX_JSON_DEPTH levels pass, one more does not', () => {
    const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
    expect(parsed(nested(MAX_JSON_DEPTH))).toBeUndefined();
    expect(parsed(nested(MAX_JSON_DEPTH + 1))).toEqual({
      kind: 'depth',
      path: Array.from({ length: MAX_JSON_DEPTH }, () => '0'),
    });
  });

  it('finds a lone surrogate in a value or a key, with its path; a pair is text', () => {
    expect(parsed('{"a":[1,"x\\ud800"]}')).toEqual({ kind: 'unicode', path: ['a', '1'] });
    expect(parsed('{"a":{"\\udc00":1}}')).toEqual({ kind: 'unicode', path: ['a', '\udc00'] });
    expect(parsed('{"a":"\\ud83d\\ude00"}')).toBeUndefined();
  });

  it('reads strings only when the text has a surrogate escape: a backslash-u text is not one', () => {
    expect(parsed('{"a":"\\\\ud800"}')).toBeUndefined();
    // Given text without such an escape, strings are not looked at.
    expect(findUnsupportedJson({ a: '\ud800' }, '{}')).toBeUndefined();
  });

  it('finds a NUL only when asked (request bodies refuse it field by field)', () => {
    const text = '{"a":["x\\u0000"]}';
    expect(findUnsupportedJson(JSON.parse(text), text)).toBeUndefined();
    expect(findUnsupportedJson(JSON.parse(text), text, { nul: true })).toEqual({
      kind: 'nul',
      path: ['a', '0'],
    });
  });
});

describe('storableText and withoutNul', () => {
  it('storable text has U+FFFD for each NUL and each half character; streamed chunks keep their halves', () => {
    expect(storableText('a\u0000b\ud83d')).toBe('a\ufffdb\ufffd');
    expect(storableText('smile 😀')).toBe('smile 😀');
    expect(withoutNul('a\u0000\ud83d')).toBe('a\ufffd\ud83d');
  });
});
