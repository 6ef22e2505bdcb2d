import { sql } from 'kysely';
import { badRequest } from '../errors.js';

/**
 * Keyset pagination, newest first, over a table with a uuid `id` and the
 * timestamp of a list's order: `created` (`created_at`: workflows,
 * sessions, tenants) or `activity` (`last_activity_at`: sessions). A page continues
 * after the position of the previous page's last row, which the client
 * holds as an opaque cursor.
 */
export type ListOrder = 'created' | 'activity';

/** The timestamp column each order pages by; `id` breaks its ties. */
const ORDER_COLUMNS = { created: 'created_at', activity: 'last_activity_at' } as const;

/** The column a list in `order` is sorted by, newest first, then by `id`. */
export function orderColumn<Order extends ListOrder>(order: Order): (typeof ORDER_COLUMNS)[Order] {
  return ORDER_COLUMNS[order];
}

export interface ListPosition {
  order: ListOrder;
  /** The order's timestamp in microseconds since the epoch: a JS Date would drop the microseconds Postgres keeps. */
  atUs: string;
  id: string;
}

/** A listed row: its position travels with it as `position_us`. */
export interface PositionedRow {
  id: string;
  position_us: string;
}

/** The timestamp `column` in microseconds since the epoch, as text: a JS Date would drop the microseconds Postgres keeps. */
export function microsOf(column: string) {
  return sql<string>`(extract(epoch from ${sql.ref(column)}) * 1000000)::bigint::text`;
}

/** The timestamp `us` microseconds (microsOf's text) after the epoch. */
export function atMicros(us: string) {
  return sql`(timestamptz 'epoch' + ${us}::bigint * interval '1 microsecond')`;
}

/** The `position_us` column of a row listed in `order`. */
export function positionMicros(order: ListOrder) {
  return microsOf(orderColumn(order)).as('position_us');
}

/** Rows after `position` in (timestamp, id) descending order. */
export function olderThan(position: ListPosition) {
  return sql<boolean>`(${sql.ref(orderColumn(position.order))}, id) < (${atMicros(position.atUs)}, ${position.id}::uuid)`;
}

/**
 * A cursor is the last item's position, base64url-encoded: opaque to
 * clients. A `created` one is `<us>.<id>`, as before there were other
 * orders, so that cursors handed out then still continue; another order's
 * is prefixed with its name.
 */
export function encodeCursor(position: ListPosition): string {
  const prefix = position.order === 'created' ? '' : `${position.order}.`;
  return Buffer.from(`${prefix}${position.atUs}.${position.id}`).toString('base64url');
}

/**
 * 16 digits of microseconds since 1970 reach the year 2286; more would
 * overflow the timestamp arithmetic of the page's query (a 500, not a 400).
 */
const CURSOR_PATTERN =
  /^(?:(activity)\.)?(\d{1,16})\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** How a list pages: the order asked for, among the orders the list offers. */
export interface ListOrdering {
  order: ListOrder;
  offered: readonly ListOrder[];
}

const CREATED_ONLY: ListOrdering = { order: 'created', offered: ['created'] };

/**
 * The position a cursor holds. 400 `invalid_cursor` for one this service
 * never returned, or returned for an order the list does not offer (another
 * list's); 400 `cursor_order_mismatch` for one of the list's other order: it
 * continues that order and no other, since a position in one order says
 * nothing of where a page of another begins.
 */
export function decodeCursor(cursor: string, ordering: ListOrdering = CREATED_ONLY): ListPosition {
  const match = CURSOR_PATTERN.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  const order: ListOrder = match?.[1] === 'activity' ? 'activity' : 'created';
  if (!match?.[2] || !match[3] || !ordering.offered.includes(order)) {
    throw badRequest('invalid_cursor', 'The cursor is not one this service returned', [
      { field: 'query.cursor', message: 'invalid cursor' },
    ]);
  }
  if (order !== ordering.order) {
    throw badRequest(
      'cursor_order_mismatch',
      `The cursor continues a list in order=${order}, not order=${ordering.order}: ask with order=${order}, or without a cursor for a first page`,
      [{ field: 'query.cursor', message: `a cursor of order=${order}` }],
    );
  }
  return { order, atUs: match[2], id: match[3] };
}

/**
 * A page of `limit` items from rows read in `order` with a limit of
 * `limit + 1` (one more than asked tells whether another page follows),
 * with the cursor that continues after its last item, null on the last page.
 */
export function pageOf<Row extends PositionedRow, Item>(
  rows: Row[],
  page: { limit: number; order: ListOrder },
  toItem: (row: Row) => Item,
): { items: Item[]; nextCursor: string | null } {
  const kept = rows.slice(0, page.limit);
  const last = kept.at(-1);
  return {
    items: kept.map(toItem),
    nextCursor:
      rows.length > page.limit && last
        ? encodeCursor({ order: page.order, atUs: last.position_us, id: last.id })
        : null,
  };
}
