import { badRequest } from '../errors.js';
import type { ListPosition } from '../store/workflows.js';

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
