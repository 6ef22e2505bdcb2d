import { z } from 'zod';

/** Headers a tenant stores with an HTTP tool or an MCP server, sent with every request. */

const MAX_HEADERS = 32;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
/** RFC 9110 field values: no CR, LF or NUL, which would split or end the header. */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]{0,8192}$/;

/** Header name -> value; `reserved` names are set by the service on every request, so refused. */
export function storedHeadersSchema(reserved: ReadonlySet<string>) {
  return z
    .record(
      z.string().regex(HEADER_NAME, 'not a valid header name'),
      z
        .string()
        .regex(HEADER_VALUE, 'must not contain line breaks or NUL, at most 8192 characters'),
    )
    .refine(
      (headers) => Object.keys(headers).length <= MAX_HEADERS,
      `at most ${MAX_HEADERS} headers`,
    )
    .refine(
      (headers) => Object.keys(headers).every((name) => !reserved.has(name.toLowerCase())),
      `must not set ${[...reserved].join(', ')}: the service sets them`,
    )
    .refine((headers) => {
      const names = Object.keys(headers).map((name) => name.toLowerCase());
      return new Set(names).size === names.length;
    }, 'names a header twice (header names are case-insensitive)');
}
