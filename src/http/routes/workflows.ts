import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { WorkflowService } from '../../workflows/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { streamWorkflowEvents } from '../sse.js';
import { idParamsSchema } from './schemas.js';
import {
  createdWorkflowSchema,
  createdWorkflowToWire,
  createWorkflowBody,
  createWorkflowHeaders,
  listWorkflowsQuery,
  workflowLinks,
  workflowPageSchema,
  workflowSchema,
  workflowToWire,
} from './workflow-schemas.js';

/** Workflows of the caller's tenant: create, read, list, cancel. Events are in workflow-events.ts. */
export const workflowRoutes: FastifyPluginAsyncZod<{ workflows: WorkflowService }> = async (
  app,
  { workflows },
) => {
  app.post(
    '/workflows',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Start a workflow',
        description:
          'Answers 202 with the new workflow’s links; it runs in the background. With an ' +
          '`Idempotency-Key`, repeating the same request answers 200 with the same workflow and ' +
          '`Idempotent-Replayed: true`; the key with a different request is a 409. With ' +
          '`Accept: text/event-stream` the response is the workflow’s event stream instead.',
        headers: createWorkflowHeaders,
        body: createWorkflowBody,
        response: {
          200: {
            description:
              'A replay of an earlier create with the same Idempotency-Key, or the event stream',
            content: {
              'application/json': { schema: createdWorkflowSchema },
              'text/event-stream': { schema: z.string() },
            },
          },
          202: createdWorkflowSchema,
          ...problemResponses(400, 401, 403, 409, 413, 415, 429),
        },
      },
    },
    async (request, reply) => {
      const { workflow, replayed } = await workflows.create(
        principalOf(request),
        request.body,
        request.headers['idempotency-key'],
      );
      if (replayed) reply.header('Idempotent-Replayed', 'true');
      if (wantsEventStream(request)) {
        await streamWorkflowEvents(request, reply, {
          workflowId: workflow.id,
          afterSeq: 0,
          workflow,
          justCreated: !replayed,
        });
        return;
      }
      return reply
        .code(replayed ? 200 : 202)
        .header('Location', workflowLinks(workflow.id).self)
        .send(createdWorkflowToWire(workflow));
    },
  );

  app.get(
    '/workflows',
    {
      schema: {
        tags: ['workflows'],
        summary: 'List the caller’s workflows, newest first',
        querystring: listWorkflowsQuery,
        response: { 200: workflowPageSchema, ...problemResponses(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const page = await workflows.list(tenant.id, request.query);
      return { items: page.items.map(workflowToWire), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/workflows/:id',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Get a workflow: status, result or error, usage',
        params: idParamsSchema,
        response: { 200: workflowSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return workflowToWire(await workflows.get(tenant.id, request.params.id));
    },
  );

  app.delete(
    '/workflows/:id',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Delete an ended workflow',
        description:
          'Deletes a completed, failed or cancelled workflow with its events, turns and plans → ' +
          '204. One queued, running or paused answers 409 `workflow_not_finished` (cancel it ' +
          'first). Its usage ledger rows and, in a session, its question and answer among the ' +
          'session’s messages are kept (delete the session to remove those); its ' +
          '`Idempotency-Key`, if it had one, may be used again.',
        params: idParamsSchema,
        response: {
          204: z.null().describe('Deleted'),
          ...problemResponses(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      await workflows.delete(tenant.id, request.params.id);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/workflows/:id/cancel',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Cancel a workflow',
        description:
          'Ends the workflow `cancelled` and stops its run, wherever it runs; the model and ' +
          'tool calls it had in flight are aborted and end `failed` (`cancelled`) in its ' +
          'events, before `workflow_end`. A finished workflow answers 409 `workflow_finished`.',
        params: idParamsSchema,
        response: { 202: workflowSchema, ...problemResponses(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const workflow = await workflows.cancel(tenant.id, request.params.id);
      return reply.code(202).send(workflowToWire(workflow));
    },
  );
};

/** Whether the client asks for the event stream by name; a wildcard Accept does not count. */
export function wantsEventStream(request: FastifyRequest): boolean {
  const accept = request.headers.accept;
  if (!accept) return false;
  return accept.split(',').some((range) => {
    const [type, ...parameters] = range.split(';').map((part) => part.trim().toLowerCase());
    const quality = parameters.find((parameter) => parameter.startsWith('q='));
    return type === 'text/event-stream' && (quality === undefined || Number(quality.slice(2)) > 0);
  });
}
