import { describe, expect, it } from 'vitest';
import { findUnsupportedJson, MAX_JSON_DEPTH } from '../../src/json-limits.js';

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
});
