import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { StreamTokens } from '../../tenancy/stream-tokens.js';
import type { WorkflowService } from '../../workflows/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { streamWorkflowEvents } from '../sse.js';
import { idParamsSchema, MAX_POSTGRES_INTEGER } from './schemas.js';

const eventsQuery = z.object({
  after: z.coerce
    .number()
    .int()
    .min(0)
    .max(MAX_POSTGRES_INTEGER)
    .optional()
    .describe('Replay the events after this seq; Last-Event-ID wins when both are given'),
  token: z
    .string()
    .optional()
    .describe(
      'A stream token from POST /v1/workflows/{id}/stream-token, for clients that cannot send headers',
    ),
});

/** Loose: the validated object replaces `request.headers`, which must keep the others. */
const eventsHeaders = z.looseObject({
  'last-event-id': z
    .string()
    // Aborting: garbage is one problem, not also an out-of-range one.
    .regex(/^\d{1,10}$/, { error: 'expected the seq of an event', abort: true })
    .refine((value) => Number(value) <= MAX_POSTGRES_INTEGER, 'expected the seq of an event')
    .optional()
    .describe('The seq of the last event received; an EventSource sends it when it reconnects'),
});

const streamTokenSchema = z
  .object({
    token: z.string().describe('Signed; valid only for this workflow’s events URL'),
    expiresAt: z.iso.datetime(),
    url: z
      .string()
      .describe('Path of the events URL with the token; resolve it against the API’s base URL'),
  })
  .meta({ id: 'StreamToken' });

const STREAM_DESCRIPTION = [
  'Server-sent events. The stream starts with a `retry:` field, replays the stored events',
  'after `Last-Event-ID` (or `?after=`; the header wins, as a browser reconnecting to a URL',
  'with `?after=` sends the newer position in it), then follows the workflow live and ends',
  'after `workflow_end`. Each persisted event is a frame `id: <seq>`, `event: <type>`,',
  '`data: <event as JSON>`; streamed answer text arrives as `event: token` frames without an',
  'id (not stored: the `answer` event carries the whole text). Comments (`: heartbeat`) keep',
  'idle streams open. A client that stops reading is dropped and resumes with Last-Event-ID.',
  'Browsers, whose EventSource cannot send headers, pass a stream token as `?token=` instead',
  'of the API key.',
].join(' ');

/** A workflow's event stream, and the stream tokens that open it from a browser. */
export const workflowEventRoutes: FastifyPluginAsyncZod<{
  workflows: Pick<WorkflowService, 'get'>;
  streamTokens: StreamTokens;
}> = async (app, { workflows, streamTokens }) => {
  app.get(
    '/workflows/:id/events',
    {
      config: { streamToken: true },
      schema: {
        tags: ['workflows'],
        summary: 'Stream a workflow’s events (SSE)',
        description: STREAM_DESCRIPTION,
        params: idParamsSchema,
        querystring: eventsQuery,
        headers: eventsHeaders,
        response: {
          200: {
            description:
              'The event stream: a `retry:` field, then one frame per event (`id:` seq, `event:` type, `data:` JSON), `event: token` chunks without id, and `: heartbeat` comments',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          204: z
            .null()
            .describe(
              'The workflow is finished and the client has its last event: stop reconnecting',
            ),
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const lastEventId = request.headers['last-event-id'];
      await streamWorkflowEvents(request, reply, {
        workflowId: request.params.id,
        ...(lastEventId === undefined
          ? { afterSeq: request.query.after ?? 0, afterSeqField: 'query.after' }
          : { afterSeq: Number(lastEventId), afterSeqField: 'headers.last-event-id' }),
      });
    },
  );

  app.post(
    '/workflows/:id/stream-token',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Get a short-lived token that opens this workflow’s event stream',
        description:
          'For browsers: `new EventSource(url)` with the returned URL. The token is signed, expires ' +
          'after STREAM_TOKEN_TTL_SECONDS and opens no other URL; ask again for a new one.',
        params: idParamsSchema,
        response: { 200: streamTokenSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const workflow = await workflows.get(tenant.id, request.params.id);
      const issued = await streamTokens.issue({ tenantId: tenant.id, workflowId: workflow.id });
      return {
        token: issued.token,
        expiresAt: issued.expiresAt.toISOString(),
        url: `${app.prefix}/workflows/${workflow.id}/events?token=${issued.token}`,
      };
    },
  );
};
