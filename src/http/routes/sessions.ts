import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { SessionService } from '../../sessions/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { idParamsSchema } from './schemas.js';
import {
  createSessionBody,
  listSessionsQuery,
  sessionMessagesQuery,
  sessionPageSchema,
  sessionPageToWire,
  sessionSchema,
  sessionToWire,
  sessionWithMessagesSchema,
  sessionWithMessagesToWire,
  updateSessionBody,
} from './session-schemas.js';

/** Sessions of the caller's tenant: create, list, read with their messages, change, delete. */
export const sessionRoutes: FastifyPluginAsyncZod<{ sessions: SessionService }> = async (
  app,
  { sessions },
) => {
  app.post(
    '/sessions',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Create a session',
        description:
          'A session groups workflows into one conversation: a workflow created with its id as ' +
          '`sessionId` sees the session’s earlier questions and answers, and its own are ' +
          'appended when it completes. Its `model`, when set, is the one its workflows use when ' +
          'their request names none (400 `unknown_model` or `model_not_allowed` as for a workflow).',
        // No body at all is an untitled session, as `{}` is.
        body: createSessionBody.nullish(),
        response: { 201: sessionSchema, ...problemResponses(400, 401, 403, 413, 415, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const session = await sessions.create(tenant, request.body ?? {});
      return reply
        .code(201)
        .header('Location', `/v1/sessions/${session.id}`)
        .send(sessionToWire(session));
    },
  );

  app.get(
    '/sessions/:id',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Get a session with a page of its messages',
        description:
          'Messages come oldest first, `limit` at a time after the seq `after`; `nextAfter` ' +
          'continues.',
        params: idParamsSchema,
        querystring: sessionMessagesQuery,
        response: {
          200: sessionWithMessagesSchema,
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const page = await sessions.get(tenant.id, request.params.id, request.query);
      return sessionWithMessagesToWire(page);
    },
  );

  app.get(
    '/sessions',
    {
      schema: {
        tags: ['sessions'],
        summary: 'List the caller’s sessions, newest first by creation or by last activity',
        description:
          '`order=activity` lists the session whose last message was appended last first (a ' +
          'session without messages by its creation), as a chat lists its conversations; a ' +
          'session talked in while a client pages moves to the first page, so the pages after ' +
          'a cursor no longer hold it. `metadata` filters either order.',
        querystring: listSessionsQuery,
        response: { 200: sessionPageSchema, ...problemResponses(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return sessionPageToWire(await sessions.list(tenant.id, request.query));
    },
  );

  app.patch(
    '/sessions/:id',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Change a session’s title, metadata or model',
        description:
          'Fields left out keep their value; `metadata` replaces the whole object. A new ' +
          '`model` is checked as at create and applies to workflows created after it.',
        params: idParamsSchema,
        body: updateSessionBody,
        response: {
          200: sessionSchema,
          ...problemResponses(400, 401, 403, 404, 413, 415, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return sessionToWire(await sessions.update(tenant, request.params.id, request.body));
    },
  );

  app.delete(
    '/sessions/:id',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Delete a session with its messages and its workflows',
        description:
          'Deletes the session, its messages and its workflows (with their events) at once. ' +
          '409 `session_has_open_workflows` while one of its workflows is queued, running or ' +
          'paused: cancel it first (`current.openWorkflowIds` names them). The usage ledger ' +
          'keeps their model calls.',
        params: idParamsSchema,
        response: {
          204: z.null().describe('Deleted'),
          ...problemResponses(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      await sessions.delete(tenant.id, request.params.id);
      return reply.code(204).send(null);
    },
  );
};
