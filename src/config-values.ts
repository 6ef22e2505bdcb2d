import { z } from 'zod';

/** The kinds of value the settings in config.ts are read as, from environment strings. */

export const integer = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, `expected a whole number from ${min} to ${max}`)
    .transform(Number)
    // Aborting: a value past `max` is one problem, not also one past the
    // largest safe integer (a long run of digits is both).
    .pipe(z.number().min(min).max(max, { abort: true }).int());

/** A positive decimal such as `0.25`; no exponent, no sign. */
export const decimal = (max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?$/, `expected a decimal number above 0, at most ${max}`)
    .transform(Number)
    .pipe(z.number().positive().max(max));

export const boolean = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'expected true or false' })
  .transform((value) => value === 'true' || value === '1' || value === 'yes');

export const postgresUrl = z
  .string()
  .trim()
  .refine((value) => {
    try {
      const url = new URL(value);
      return (url.protocol === 'postgres:' || url.protocol === 'postgresql:') && url.host !== '';
    } catch {
      return false;
    }
  }, 'expected a postgres://user:password@host:port/database URL');

/** The items of a comma-separated list, trimmed, blanks dropped. */
export function commaList(text: string): string[] {
  return text
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/** A comma-separated list (`parse` splits it), each item checked; unset: empty. */
export const checkedList = (
  parse: (text: string) => string[],
  valid: (item: string) => boolean,
  expected: string,
) =>
  z
    .string()
    .transform(parse)
    .pipe(
      z.array(
        z.string().refine(valid, {
          error: (issue) => `"${String(issue.input)}" is not ${expected}`,
        }),
      ),
    )
    .default([]);
