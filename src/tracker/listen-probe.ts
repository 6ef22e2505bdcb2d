import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import type pg from 'pg';
import type { Db } from '../store/database.js';

/**
 * How long a notification sent through the pool may take to reach the
 * LISTEN connection; on a direct connection it takes milliseconds.
 */
export const LISTEN_PROBE_TIMEOUT_MS = 5_000;

/**
 * Proves that `listener` hears what the pool's connections NOTIFY: it
 * LISTENs on a channel of its own, the pool NOTIFYs that channel, and
 * once the notification has arrived it UNLISTENs. It fails when the two
 * reach different databases, or when `listener` goes through a
 * transaction-mode pooler (PgBouncer): its LISTEN then ran on a server
 * session the pooler hands to other clients, so the notifications of
 * other replicas never reach this one, and their workflows' event streams
 * here would wait forever without a sign.
 */
export async function probeListening(options: {
  listener: pg.Client;
  db: Db;
  timeoutMs?: number;
}): Promise<void> {
  const { listener } = options;
  const timeoutMs = options.timeoutMs ?? LISTEN_PROBE_TIMEOUT_MS;
  const channel = `waymark_probe_${randomBytes(8).toString('hex')}`;
  let onNotification: (message: pg.Notification) => void = () => undefined;
  let timer: NodeJS.Timeout | undefined;
  const heard = new Promise<boolean>((resolve) => {
    onNotification = (message) => {
      if (message.channel === channel) resolve(true);
    };
    listener.on('notification', onNotification);
  });
  try {
    await listener.query(`LISTEN ${channel}`);
    await sql`SELECT pg_notify(${channel}, '')`.execute(options.db);
    const arrived = await Promise.race([
      heard,
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    if (!arrived) {
      throw new Error(
        `the LISTEN connection heard no notification sent through the pool within ${timeoutMs} ms: ` +
          'DATABASE_LISTEN_URL (DATABASE_URL when unset) must reach the database DATABASE_URL names ' +
          'directly, not through a transaction-mode pooler such as PgBouncer',
      );
    }
    await listener.query(`UNLISTEN ${channel}`);
  } finally {
    clearTimeout(timer);
    listener.off('notification', onNotification);
  }
}
