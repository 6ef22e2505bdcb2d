import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { PipelineView } from '../../orchestrator/pipeline/pipeline-view.js';
import type { PipelineReviews } from '../../orchestrator/pipeline/review.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import { idParamsSchema } from './schemas.js';
import { usageSchema } from './workflow-schemas.js';

/** `GET /v1/workflows/:id/pipeline`: the plan of a complex workflow and where each stage is. */

const attemptSchema = z.object({
  attempt: z.number().int(),
  status: z.enum(['pending', 'started', 'completed', 'failed']),
  reason: z
    .string()
    .describe('first, validation_retry, user_retry, user_modify or resumed (after a crash)'),
  feedback: z.string().nullable(),
  validation: z.object({ passed: z.boolean(), findings: z.array(z.string()) }).nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  usage: usageSchema,
  accepted: z.boolean().describe('The user continued past this attempt'),
  startedAt: z.iso.datetime().nullable(),
  finishedAt: z.iso.datetime().nullable(),
  elapsedMs: z.number().int().nullable(),
});

const stageSchema = z.object({
  id: z.string(),
  title: z.string(),
  goal: z.string(),
  tools: z.array(z.string()).optional(),
  dependsOn: z.array(z.string()).optional(),
  checkpoint: z.boolean(),
  expectedOutput: z.record(z.string(), z.unknown()).optional(),
  status: z
    .enum(['pending', 'running', 'completed', 'failed', 'awaiting_review', 'skipped'])
    .describe(
      'skipped: never run, as the workflow ended first, or the failed synthesis its retry runs answers instead',
    ),
  attempts: z.array(attemptSchema),
  result: z.string().nullable().describe('The latest result: the one to review at a pause'),
});

export const pipelineSchema = z
  .object({
    revision: z.number().int().describe('Plan revision: 1 as planned, +1 per `modify` with a plan'),
    stages: z.array(stageSchema),
    next: z
      .enum(['run_stage', 'await_review', 'stage_failed', 'synthesize', 'synthesis_failed', 'none'])
      .describe(
        'What the pipeline does next; synthesis_failed while it waits for a retry of its failed synthesis; none once the workflow has ended',
      ),
    currentStageId: z.string().nullable(),
  })
  .meta({ id: 'Pipeline' });

export const workflowPipelineRoutes: FastifyPluginAsyncZod<{ reviews: PipelineReviews }> = async (
  app,
  { reviews },
) => {
  app.get(
    '/workflows/:id/pipeline',
    {
      schema: {
        tags: ['workflows'],
        summary: 'The plan of a complex workflow, with each stage’s status, attempts and result',
        description: '404 when the workflow has no plan (a simple workflow, or not planned yet).',
        params: idParamsSchema,
        response: { 200: pipelineSchema, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      return pipelineToWire(await reviews.view(tenant.id, request.params.id));
    },
  );
};

function pipelineToWire(view: PipelineView): z.infer<typeof pipelineSchema> {
  return {
    revision: view.revision,
    next: view.next,
    currentStageId: view.currentStageId,
    stages: view.stages.map((stage) => ({
      ...stage,
      attempts: stage.attempts.map((attempt) => ({
        ...attempt,
        startedAt: attempt.startedAt?.toISOString() ?? null,
        finishedAt: attempt.finishedAt?.toISOString() ?? null,
      })),
    })),
  };
}
