import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { SessionService } from '../../sessions/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { idParamsSchema } from './schemas.js';
import {
  createSessionBody,
  sessionMessagesQuery,
  sessionSchema,
  sessionToWire,
  sessionWithMessagesSchema,
  sessionWithMessagesToWire,
} from './session-schemas.js';

/** Sessions of the caller's tenant: create, and read with their messages. */
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
};
