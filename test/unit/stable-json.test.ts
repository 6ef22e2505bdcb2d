import { describe, expect, it } from 'vitest';
import { stableJson } from '../../src/stable-json.js';

describe('stableJson', () => {
  it('sorts every object’s keys, nested ones too, and keeps array order', () => {
    expect(stableJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe(
      '{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}',
    );
    expect(stableJson({ a: 1, b: 2 })).toBe(stableJson({ b: 2, a: 1 }));
  });

  it('leaves out undefined members, so spelling one out changes nothing', () => {
    expect(stableJson({ a: 1, b: undefined })).toBe(stableJson({ a: 1 }));
  });

  it('writes scalars as JSON does, and undefined alone as null', () => {
    expect(stableJson('x"y')).toBe('"x\\"y"');
    expect(stableJson(1.5)).toBe('1.5');
    expect(stableJson(undefined)).toBe('null');
  });
});
