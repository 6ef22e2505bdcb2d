import { z } from 'zod';
import type { SessionPage, SessionWithMessages } from '../../sessions/service.js';
import { SESSION_ORDERS, SESSION_ROLES, type Session } from '../../sessions/types.js';
import {
  hasNoNulInJson,
  listPageFields,
  MAX_POSTGRES_INTEGER,
  metadataSchema,
  modelNameSchema,
  NO_NUL_MESSAGE,
  nameSchema,
  pageSchema,
} from './schemas.js';

/** Wire shapes of the session routes; the OpenAPI document names them. */

export const createSessionBody = z
  .object({
    title: nameSchema.optional().describe('A name for people, at most 200 characters'),
    metadata: metadataSchema('the session'),
    model: modelNameSchema
      .optional()
      .describe('Catalogue name of the model its workflows use when their request names none'),
  })
  .strict();

export const updateSessionBody = z
  .object({
    title: nameSchema.nullable().optional().describe('A new name; null removes it'),
    metadata: metadataSchema('the session').describe(
      'Replaces the session’s metadata as a whole; at most 16 KiB as JSON',
    ),
    model: modelNameSchema
      .nullable()
      .optional()
      .describe('A new model for its later workflows; null: they use the tenant’s default'),
  })
  .strict()
  .refine(
    (change) => Object.values(change).some((value) => value !== undefined),
    'name at least one of title, metadata, model',
  );

/** `?metadata=`: a JSON object a session's metadata must contain. */
const metadataFilter = z
  .string()
  .max(2048)
  .transform((text, context) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      context.addIssue({ code: 'custom', message: 'must be a JSON object' });
      return z.NEVER;
    }
  })
  .pipe(z.record(z.string(), z.unknown()).refine(hasNoNulInJson, NO_NUL_MESSAGE))
  .describe(
    'A JSON object, URL-encoded: only sessions whose metadata contains it (`{"user":"u-1"}` matches `{"user":"u-1","topic":"tax"}`)',
  );

export const listSessionsQuery = z
  .object({
    ...listPageFields,
    order: z
      .enum(SESSION_ORDERS)
      .default('created')
      .describe(
        '`created`: newest first by creation; `activity`: by `lastActivityAt`, the session talked in last first. A `cursor` continues the order it came from (400 `cursor_order_mismatch` with the other)',
      ),
    metadata: metadataFilter.optional(),
  })
  .strict();

export const sessionMessagesQuery = z
  .object({
    after: z.coerce
      .number()
      .int()
      .min(0)
      .max(MAX_POSTGRES_INTEGER)
      .default(0)
      .describe('Seq of the last message already read (nextAfter of the previous page)'),
    limit: z.coerce.number().int().min(1).max(200).default(50),
  })
  .strict();

export const sessionMessageSchema = z
  .object({
    seq: z.number().int().describe('1, 2, 3... without gaps'),
    role: z.enum(SESSION_ROLES),
    content: z.string(),
    workflowId: z.uuid().nullable().describe('The workflow whose question or answer this is'),
    createdAt: z.iso.datetime(),
  })
  .meta({ id: 'SessionMessage' });

const sessionFields = {
  id: z.uuid(),
  title: z.string().nullable(),
  metadata: z.record(z.string(), z.unknown()),
  model: z
    .string()
    .nullable()
    .describe('The model its workflows use when their request names none'),
  lastSeq: z.number().int().describe('Seq of the latest message; 0 while there is none'),
  createdAt: z.iso.datetime(),
  updatedAt: z.iso.datetime().describe('Its last change: a message appended, or a PATCH'),
  lastActivityAt: z.iso
    .datetime()
    .describe('The time of its latest message; its creation while it has none'),
};

export const sessionSchema = z.object(sessionFields).meta({ id: 'Session' });

export const sessionWithMessagesSchema = z
  .object({
    ...sessionFields,
    messages: z
      .array(sessionMessageSchema)
      .describe(
        'A page of the messages, oldest first: each completed workflow’s question and answer',
      ),
    nextAfter: z
      .number()
      .int()
      .nullable()
      .describe('Pass as `after` for the next page; null on the last page'),
  })
  .meta({ id: 'SessionWithMessages' });

export const sessionPageSchema = pageSchema(sessionSchema, 'SessionPage');

export function sessionPageToWire(page: SessionPage): z.infer<typeof sessionPageSchema> {
  return { items: page.items.map(sessionToWire), nextCursor: page.nextCursor };
}

export function sessionToWire(session: Session): z.infer<typeof sessionSchema> {
  return {
    id: session.id,
    title: session.title,
    metadata: session.metadata,
    model: session.model,
    lastSeq: session.lastSeq,
    createdAt: session.createdAt.toISOString(),
    updatedAt: session.updatedAt.toISOString(),
    lastActivityAt: session.lastActivityAt.toISOString(),
  };
}

export function sessionWithMessagesToWire(
  page: SessionWithMessages,
): z.infer<typeof sessionWithMessagesSchema> {
  return {
    ...sessionToWire(page.session),
    messages: page.messages.map((message) => ({
      seq: message.seq,
      role: message.role,
      content: message.content,
      workflowId: message.workflowId,
      createdAt: message.createdAt.toISOString(),
    })),
    nextAfter: page.nextAfter,
  };
}
