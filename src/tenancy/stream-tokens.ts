import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { unauthorized } from '../errors.js';
import type { Db } from '../store/database.js';

/**
 * Stream tokens: a browser's EventSource cannot send an Authorization
 * header, and an API key must never travel in a URL (it would end up in
 * proxy logs and browser history). A member gets a short-lived token bound
 * to one workflow instead, and puts it in `?token=` of that workflow's
 * events URL.
 *
 * A token is `base64url(JSON {tenantId, workflowId, exp}) "." base64url(HMAC-SHA256)`.
 * Tokens of earlier releases also carry `keyId`, the API key that asked for
 * them, when the rate limit was per key: it is ignored, so they stay valid
 * across an upgrade.
 * The HMAC key is one per deployment, shared by all replicas through the
 * `service_secrets` table, so a token issued by one replica is accepted by
 * every other; nothing is stored per token.
 */

export interface StreamGrant {
  tenantId: string;
  workflowId: string;
  expiresAt: Date;
}

export interface IssuedStreamToken {
  token: string;
  expiresAt: Date;
}

const SECRET_NAME = 'stream-token-hmac-sha256';
const SECRET_BYTES = 32;
/** A real token is ~170 characters; anything much longer is not worth hashing. */
const MAX_TOKEN_LENGTH = 1024;
const TOKEN_PATTERN = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})$/;

/** Not strict: earlier releases' tokens carry a `keyId` too (above). */
const payloadSchema = z.object({
  tenantId: z.uuid(),
  workflowId: z.uuid(),
  /** Unix time in seconds, as in JWT. */
  exp: z.number().int().positive(),
});

export function createStreamTokens(options: {
  db: Db;
  ttlSeconds: number;
  /** Milliseconds since the epoch; tests inject a clock. */
  now?: () => number;
}) {
  const now = options.now ?? Date.now;
  // Read once per process: the secret never changes after its first insert.
  let signingKey: Promise<Buffer> | undefined;

  function key(): Promise<Buffer> {
    signingKey ??= loadOrCreateSecret(options.db).catch((error: unknown) => {
      signingKey = undefined; // a failed read is retried by the next call
      throw error;
    });
    return signingKey;
  }

  return {
    /** A token for the events URL of one workflow; the caller has checked the workflow is the tenant's. */
    async issue(grant: { tenantId: string; workflowId: string }): Promise<IssuedStreamToken> {
      // Rounded up so a token lives at least the configured time.
      const exp = Math.ceil(now() / 1000) + options.ttlSeconds;
      const { tenantId, workflowId } = grant;
      const payload = Buffer.from(JSON.stringify({ tenantId, workflowId, exp })).toString(
        'base64url',
      );
      const signature = sign(await key(), payload).toString('base64url');
      return { token: `${payload}.${signature}`, expiresAt: new Date(exp * 1000) };
    },

    /** The grant of a valid token; a malformed, forged or expired one is a 401. */
    async verify(token: string): Promise<StreamGrant> {
      const match = token.length <= MAX_TOKEN_LENGTH ? TOKEN_PATTERN.exec(token) : null;
      const [, payload, signature] = match ?? [];
      if (!payload || !signature) throw invalidToken();
      const expected = sign(await key(), payload);
      const given = Buffer.from(signature, 'base64url');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw invalidToken();
      }
      const parsed = payloadSchema.safeParse(parseJson(Buffer.from(payload, 'base64url')));
      // A valid signature over a payload we cannot read means a format change, not a forgery.
      if (!parsed.success) throw invalidToken();
      const { tenantId, workflowId, exp } = parsed.data;
      if (exp * 1000 <= now()) {
        throw unauthorized(
          'stream_token_expired',
          'The stream token has expired; ask POST /v1/workflows/{id}/stream-token for a new one',
        );
      }
      return { tenantId, workflowId, expiresAt: new Date(exp * 1000) };
    },
  };
}

export type StreamTokens = ReturnType<typeof createStreamTokens>;

function sign(key: Buffer, payload: string): Buffer {
  return createHmac('sha256', key).update(payload).digest();
}

function invalidToken() {
  return unauthorized('invalid_stream_token', 'The stream token is not valid');
}

function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}

/**
 * The deployment's signing secret. Replicas starting together may all try
 * to create it: the first INSERT wins, ON CONFLICT DO NOTHING makes the
 * others a no-op, and everyone reads the winner. Two plain statements, no
 * session state, so it works through a transaction pooler.
 */
async function loadOrCreateSecret(db: Db): Promise<Buffer> {
  await db
    .insertInto('service_secrets')
    .values({ name: SECRET_NAME, value: randomBytes(SECRET_BYTES) })
    .onConflict((conflict) => conflict.column('name').doNothing())
    .execute();
  const row = await db
    .selectFrom('service_secrets')
    .select('value')
    .where('name', '=', SECRET_NAME)
    .executeTakeFirstOrThrow();
  return row.value;
}
