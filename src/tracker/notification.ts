import { z } from 'zod';

/**
 * What travels on the NOTIFY channel. Persisted events travel as a pointer
 * (the workflow and its last seq): each replica reads them from the store
 * once for all its subscribers, and NOTIFY's 8000-byte payload limit never
 * bites. Token chunks are not stored, so they travel inline.
 */
export type Notification =
  | { kind: 'events'; workflowId: string; lastSeq: number; origin: string }
  | { kind: 'tokens'; workflowId: string; text: string; origin: string };

const wireSchema = z.union([
  z.object({ k: z.literal('e'), w: z.string(), s: z.number().int(), o: z.string() }),
  z.object({ k: z.literal('t'), w: z.string(), t: z.string(), o: z.string() }),
]);

/** PostgreSQL refuses NOTIFY payloads of 8000 bytes or more. */
export const MAX_PAYLOAD_BYTES = 7900;

export function notificationPayload(notification: Notification): string {
  return JSON.stringify(
    notification.kind === 'events'
      ? { k: 'e', w: notification.workflowId, s: notification.lastSeq, o: notification.origin }
      : { k: 't', w: notification.workflowId, t: notification.text, o: notification.origin },
  );
}

export function parseNotification(payload: string): Notification | undefined {
  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    return undefined;
  }
  const parsed = wireSchema.safeParse(json);
  if (!parsed.success) return undefined;
  const wire = parsed.data;
  return wire.k === 'e'
    ? { kind: 'events', workflowId: wire.w, lastSeq: wire.s, origin: wire.o }
    : { kind: 'tokens', workflowId: wire.w, text: wire.t, origin: wire.o };
}
