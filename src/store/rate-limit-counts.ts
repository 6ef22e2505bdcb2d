import { sql } from 'kysely';
import type { Db } from './database.js';

/** What one replica let through of a key since it last added to the key's count. */
export interface CountedSince {
  key: string;
  count: number;
}

/** A key's count in a window summed over the replicas, and in the window before it (null: none). */
export interface SharedCount {
  key: string;
  count: number;
  previous: number | null;
}

/**
 * The rate-limit counts the replicas share (migration 0028): each adds
 * what it let through, and reads back the sums.
 */
export function rateLimitCountsRepository(db: Db) {
  return {
    /**
     * Adds `counted` to the keys' counts of the window starting at
     * `window.start` (a count of 0 adds nothing: the key is only read), and
     * returns each key's sum with its sum of the window before. Rows are
     * added in the order of their keys, so that two replicas adding the
     * same keys lock them in the same order and never deadlock.
     */
    async add(
      window: { ms: number; start: Date },
      counted: readonly CountedSince[],
    ): Promise<SharedCount[]> {
      if (counted.length === 0) return [];
      const previousStart = new Date(window.start.getTime() - window.ms);
      const { rows } = await sql<{ key: string; count: string; previous: string | null }>`
        WITH sent AS (
          SELECT t.key, t.count
          FROM unnest(${counted.map((each) => each.key)}::text[], ${counted.map((each) => each.count)}::bigint[])
            AS t(key, count)
        ), added AS (
          INSERT INTO rate_limit_counts (key, window_ms, window_start, count)
          SELECT sent.key, ${window.ms}, ${window.start}, sent.count FROM sent
          WHERE sent.count > 0
          ORDER BY sent.key
          ON CONFLICT (key, window_ms, window_start)
            DO UPDATE SET count = rate_limit_counts.count + excluded.count
          RETURNING key, count
        )
        SELECT sent.key,
          coalesce(added.count, (
            SELECT c.count FROM rate_limit_counts c
            WHERE c.key = sent.key AND c.window_ms = ${window.ms} AND c.window_start = ${window.start}
          ), 0) AS count,
          (
            SELECT p.count FROM rate_limit_counts p
            WHERE p.key = sent.key AND p.window_ms = ${window.ms} AND p.window_start = ${previousStart}
          ) AS previous
        FROM sent LEFT JOIN added ON added.key = sent.key`.execute(db);
      return rows.map((row) => ({
        key: row.key,
        count: Number(row.count),
        previous: row.previous === null ? null : Number(row.previous),
      }));
    },

    /**
     * Deletes the counts no replica reads any more: of this window length,
     * those before the window before `current`; of any other (replicas
     * configured otherwise, windows of at most an hour), those over two
     * hours old.
     */
    async deletePast(window: { ms: number; start: Date }): Promise<number> {
      const previousStart = new Date(window.start.getTime() - window.ms);
      const result = await db
        .deleteFrom('rate_limit_counts')
        .where((eb) =>
          eb.or([
            eb.and([eb('window_ms', '=', window.ms), eb('window_start', '<', previousStart)]),
            eb('window_start', '<', sql<Date>`now() - interval '2 hours'`),
          ]),
        )
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },
  };
}
