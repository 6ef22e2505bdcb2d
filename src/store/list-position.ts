import { sql } from 'kysely';
import { badRequest } from '../errors.js';

/**
 * Keyset pagination, newest first, over a table with `created_at` and a
 * uuid `id` (workflows, sessions): a page continues after the position of
 * the previous page's last row, which the client holds as an opaque cursor.
 */
export interface ListPosition {
  /** created_at in microseconds since the epoch: a JS Date would drop the microseconds Postgres keeps. */
  createdAtUs: string;
  id: string;
}

/** A listed row: its position travels with it as `created_at_us`. */
export interface PositionedRow {
  id: string;
  created_at_us: string;
}

/** The `created_at_us` column of a listed row. */
export function createdAtMicros() {
  return sql<string>`(extract(epoch from created_at) * 1000000)::bigint::text`.as('created_at_us');
}

/** Rows after `position` in (created_at, id) descending order. */
export function olderThan(position: ListPosition) {
  return sql<boolean>`(created_at, id) < (timestamptz 'epoch' + ${position.createdAtUs}::bigint * interval '1 microsecond', ${position.id}::uuid)`;
}

/** A cursor is the last item's position, base64url-encoded: opaque to clients. */
export function encodeCursor(position: ListPosition): string {
  return Buffer.from(`${position.createdAtUs}.${position.id}`).toString('base64url');
}

/**
 * 16 digits of microseconds since 1970 reach the year 2286; more would
 * overflow the timestamp arithmetic of the page's query (a 500, not a 400).
 */
const CURSOR_PATTERN =
  /^(\d{1,16})\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

export function decodeCursor(cursor: string): ListPosition {
  const match = CURSOR_PATTERN.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match?.[1] || !match[2]) {
    throw badRequest('invalid_cursor', 'The cursor is not one this service returned', [
      { field: 'query.cursor', message: 'invalid cursor' },
    ]);
  }
  return { createdAtUs: match[1], id: match[2] };
}

/**
 * A page of `limit` items from rows read with a limit of `limit + 1` (one
 * more than asked tells whether another page follows), with the cursor
 * that continues after its last item, null on the last page.
 */
export function pageOf<Row extends PositionedRow, Item>(
  rows: Row[],
  limit: number,
  toItem: (row: Row) => Item,
): { items: Item[]; nextCursor: string | null } {
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return {
    items: page.map(toItem),
    nextCursor:
      rows.length > limit && last
        ? encodeCursor({ createdAtUs: last.created_at_us, id: last.id })
        : null,
  };
}
