import { z } from 'zod';

/**
 * What travels on the NOTIFY channel. Persisted events travel as a pointer
 * (the workflow and its last seq): each replica reads them from the store
 * once for all its subscribers, and NOTIFY's 8000-byte payload limit never
 * bites. Token chunks are not stored, so they travel inline: in the
 * notification of the events they were streamed among, with the seq they
 * follow (`tokens`), or alone when no events go with them. A principals
 * notification tells the replicas' API-key caches what a committed change
 * to a key or tenant touched (tenancy/principal-cache.ts); it names the key
 * by id. A key just issued is such a change too, named by its hash as
 * well (the hex of the SHA-256 the store holds, never the secret), so that
 * the replicas know it as active without reading it.
 */
export type Notification =
  | {
      kind: 'events';
      workflowId: string;
      lastSeq: number;
      origin: string;
      /** Token text that follows the event `afterSeq` and precedes the next one. */
      tokens?: { text: string; afterSeq: number };
    }
  | { kind: 'tokens'; workflowId: string; text: string; origin: string }
  | PrincipalsNotification;

/** One key of a tenant changed, or (keyId null) the tenant and so every key of it. */
export interface PrincipalsNotification {
  kind: 'principals';
  tenantId: string;
  keyId: string | null;
  origin: string;
  /**
   * The key was just issued, with this hash (hex): the replicas know it as
   * active from now on (http/auth-failures.ts). A replica that does not
   * read the field drops the key's cached principals, of which it has none.
   */
  issuedKeyHash?: string;
}

const wireSchema = z.union([
  z.object({
    k: z.literal('e'),
    w: z.string(),
    s: z.number().int(),
    o: z.string(),
    t: z.string().optional(),
    a: z.number().int().optional(),
  }),
  z.object({ k: z.literal('t'), w: z.string(), t: z.string(), o: z.string() }),
  z.object({
    k: z.literal('a'),
    t: z.string(),
    i: z.string().nullable(),
    o: z.string(),
    n: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional(),
  }),
]);

/** PostgreSQL refuses NOTIFY payloads of 8000 bytes or more. */
export const MAX_PAYLOAD_BYTES = 7900;

export function notificationPayload(notification: Notification): string {
  switch (notification.kind) {
    case 'events':
      return JSON.stringify({
        k: 'e',
        w: notification.workflowId,
        s: notification.lastSeq,
        o: notification.origin,
        ...(notification.tokens
          ? { t: notification.tokens.text, a: notification.tokens.afterSeq }
          : {}),
      });
    case 'tokens':
      return JSON.stringify({
        k: 't',
        w: notification.workflowId,
        t: notification.text,
        o: notification.origin,
      });
    case 'principals':
      return JSON.stringify({
        k: 'a',
        t: notification.tenantId,
        i: notification.keyId,
        o: notification.origin,
        ...(notification.issuedKeyHash ? { n: notification.issuedKeyHash } : {}),
      });
  }
}

/**
 * The notification in `payload`; undefined when it is malformed. With
 * `ownOrigin`, null for one that replica sent (its events were delivered
 * in-process already), told by its origin alone: every statement's NOTIFY
 * comes back to the replica that made it, and validating those cost ~10
 * µs each, two per simple workflow.
 */
export function parseNotification(
  payload: string,
  ownOrigin?: string,
): Notification | null | undefined {
  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (ownOrigin !== undefined && originOf(json) === ownOrigin) return null;
  const parsed = wireSchema.safeParse(json);
  if (!parsed.success) return undefined;
  const wire = parsed.data;
  switch (wire.k) {
    case 'e':
      return {
        kind: 'events',
        workflowId: wire.w,
        lastSeq: wire.s,
        origin: wire.o,
        ...(wire.t !== undefined && wire.a !== undefined
          ? { tokens: { text: wire.t, afterSeq: wire.a } }
          : {}),
      };
    case 't':
      return { kind: 'tokens', workflowId: wire.w, text: wire.t, origin: wire.o };
    case 'a':
      return {
        kind: 'principals',
        tenantId: wire.t,
        keyId: wire.i,
        origin: wire.o,
        ...(wire.n ? { issuedKeyHash: wire.n } : {}),
      };
  }
}

function originOf(json: unknown): unknown {
  return typeof json === 'object' && json !== null ? (json as { o?: unknown }).o : undefined;
}

/** Splits text into pieces of at most `maxBytes` UTF-8 bytes without cutting a character. */
export function splitUtf8(text: string, maxBytes: number): string[] {
  const pieces: string[] = [];
  let current = '';
  let bytes = 0;
  for (const char of text) {
    const size = Buffer.byteLength(char);
    if (bytes + size > maxBytes) {
      pieces.push(current);
      current = '';
      bytes = 0;
    }
    current += char;
    bytes += size;
  }
  if (current) pieces.push(current);
  return pieces;
}
