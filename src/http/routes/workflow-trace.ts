import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../store/database.js';
import type { WorkflowService } from '../../workflows/service.js';
import {
  readWorkflowTrace,
  SPAN_KINDS,
  SPAN_STATUSES,
  TRACE_MAX_EVENTS,
  type WorkflowTrace,
} from '../../workflows/trace.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { idParamsSchema } from './schemas.js';

/** `GET /v1/workflows/:id/trace`: a workflow's event log as spans (workflows/trace.ts). */

const spanSchema = z.object({
  id: z.number().int().describe('The seq of the event that started the span; 0 for the workflow'),
  parentId: z.number().int().nullable(),
  kind: z.enum(SPAN_KINDS),
  name: z
    .string()
    .describe(
      'workflow; a stage’s id; a model call’s step; a tool’s name; a wait’s reason (checkpoint, clarification, tool_approval, stage_failed, synthesis_failed)',
    ),
  step: z.string().nullable(),
  status: z.enum(SPAN_STATUSES).describe('open while it runs (or, for a wait, while paused)'),
  startSeq: z.number().int().nullable().describe('Null for the workflow, which starts at creation'),
  endSeq: z.number().int().nullable(),
  startedAt: z.iso.datetime(),
  endedAt: z.iso.datetime().nullable(),
  durationMs: z.number().int().nullable(),
  attributes: z
    .record(z.string(), z.unknown())
    .describe('The detail of the event that started the span, then of the one that ended it'),
});

export const traceSchema = z
  .object({
    workflowId: z.uuid(),
    lastSeq: z.number().int().describe('The last event read; follow the events after it'),
    truncated: z
      .boolean()
      .describe(
        `The log goes on past lastSeq: the trace read its first ${TRACE_MAX_EVENTS} events and stopped. Spans still open at lastSeq show as open; the events after it (GET /v1/workflows/:id/events?after=<lastSeq>) hold the rest`,
      ),
    spans: z.array(spanSchema),
  })
  .meta({ id: 'WorkflowTrace' });

export const workflowTraceRoutes: FastifyPluginAsyncZod<{
  db: Db;
  workflows: Pick<WorkflowService, 'get'>;
}> = async (app, deps) => {
  app.get(
    '/workflows/:id/trace',
    {
      schema: {
        tags: ['workflows'],
        summary: 'A workflow’s spans: its stage attempts, model calls, tool calls and waits',
        params: idParamsSchema,
        response: { 200: traceSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const trace = await readWorkflowTrace(deps, {
        tenantId: tenant.id,
        workflowId: request.params.id,
      });
      return traceToWire(trace);
    },
  );
};

function traceToWire(trace: WorkflowTrace): z.infer<typeof traceSchema> {
  return {
    ...trace,
    spans: trace.spans.map((span) => ({
      ...span,
      startedAt: span.startedAt.toISOString(),
      endedAt: span.endedAt?.toISOString() ?? null,
    })),
  };
}
