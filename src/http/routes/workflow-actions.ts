import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { badRequest } from '../../errors.js';
import type { PipelineReviews } from '../../orchestrator/pipeline/review.js';
import type { WorkflowService } from '../../workflows/service.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';
import {
  hasNoNul,
  hasNoNulInJson,
  idParamsSchema,
  MAX_POSTGRES_INTEGER,
  NO_NUL_MESSAGE,
} from './schemas.js';
import { workflowSchema, workflowToWire } from './workflow-schemas.js';

/**
 * What a client does to a paused workflow: answer its question; approve or
 * decline the tool call it waits on; continue,
 * modify or retry a pipeline stage at a checkpoint or after it failed. Each action
 * may carry the version the client saw (body `version` or `If-Match`); a
 * stale one is a 409, and so is acting on a workflow that does not wait for
 * that action (the problem's `current` says what it is doing instead).
 */

const versionField = z
  .number()
  .int()
  .min(1)
  .max(MAX_POSTGRES_INTEGER)
  .optional()
  .describe('The workflow version the client saw; a stale one is a 409. Or send `If-Match`.');

export const actionHeaders = z.looseObject({
  'if-match': z
    .string()
    .max(64)
    .optional()
    .describe('The workflow version the client saw, e.g. `"4"`; the same as body `version`'),
});

export const answerWorkflowBody = z
  .object({
    answer: z
      .string()
      // No min: an empty answer is a blank one (answer_blank), however blank.
      .max(10_000)
      .refine(hasNoNul, NO_NUL_MESSAGE)
      .describe(
        'yes_no: "yes" or "no"; multiple_choice: one of the options; free_text: the user’s own words',
      ),
    version: versionField,
  })
  .strict();

export const approveWorkflowBody = z
  .object({
    toolCallId: z
      .string()
      .min(1)
      .max(256)
      .refine(hasNoNul, NO_NUL_MESSAGE)
      .optional()
      .describe(
        'The call decided on (`detail.toolCallId` of the `tool_approval_request`); the pending one when absent',
      ),
    approved: z.boolean().describe('true: the call runs; false: it never runs'),
    reason: z
      .string()
      .max(10_000)
      .refine(hasNoNul, NO_NUL_MESSAGE)
      .optional()
      .describe('Why; the model is told it with a refusal'),
    version: versionField,
  })
  .strict();

export const reviewBody = z.object({ version: versionField }).strict();

export const modifyBody = z
  .object({
    feedback: z
      .string()
      .min(1)
      .max(10_000)
      .refine(hasNoNul, NO_NUL_MESSAGE)
      .describe('What the re-run of the stage should do differently'),
    plan: z
      .object({ stages: z.array(z.unknown()).max(500) })
      .strict()
      .refine(hasNoNulInJson, NO_NUL_MESSAGE)
      .optional()
      .describe(
        'Replaces the stages after the current one (same shape as the planned stages; validated ' +
          'the same way), with a `plan` event for the new revision; an empty list drops them: the ' +
          'answer is written after the re-run (once it is continued, at a checkpoint)',
      ),
    version: versionField,
  })
  .strict();

const REVIEW_CONFLICTS =
  '409 `not_awaiting_input` when the workflow is not paused at a checkpoint or a failed stage ' +
  '(the problem’s `current` has its status and version), `stale_version` when `version` is not ' +
  'the current one. Of concurrent actions on one workflow exactly one is accepted.';

export const workflowActionRoutes: FastifyPluginAsyncZod<{
  workflows: WorkflowService;
  reviews: PipelineReviews;
}> = async (app, { workflows, reviews }) => {
  app.post(
    '/workflows/:id/answer',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Answer the question of a workflow awaiting clarification',
        description:
          'Resumes a workflow paused by `ask_user` (`awaiting_input`, reason `clarification`): ' +
          'the answer becomes the result of that question and the tool loop goes on. 400 when ' +
          'the answer does not fit the question (`answer_not_an_option`, `answer_not_yes_no`); ' +
          '409 `not_awaiting_input` when the workflow does not wait for an answer, ' +
          '`stale_version` when `version` is not the current one.',
        params: idParamsSchema,
        headers: actionHeaders,
        body: answerWorkflowBody,
        response: { 202: workflowSchema, ...problemResponses(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const workflow = await workflows.answer(tenant.id, request.params.id, {
        answer: request.body.answer,
        version: expectedVersion(request.body.version, request.headers['if-match']),
      });
      return reply.code(202).send(workflowToWire(workflow));
    },
  );

  app.post(
    '/workflows/:id/approve',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Approve or decline the tool call a workflow waits on',
        description:
          'Resumes a workflow paused before a call of a tool that requires approval ' +
          '(`awaiting_input`, reason `tool_approval`; the `tool_approval_request` event names ' +
          'the call): approved, the call runs and its result goes to the model; declined, it ' +
          'never runs and the model is told the user declined it, with the reason. One call ' +
          'waits at a time: another held call of the same turn pauses the workflow again. 400 ' +
          '`tool_call_not_pending` when `toolCallId` is not the pending call; 409 ' +
          '`not_awaiting_input` when the workflow does not wait for an approval, ' +
          '`stale_version` when `version` is not the current one.',
        params: idParamsSchema,
        headers: actionHeaders,
        body: approveWorkflowBody,
        response: { 202: workflowSchema, ...problemResponses(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const { toolCallId, approved, reason } = request.body;
      const workflow = await workflows.approve(tenant.id, request.params.id, {
        ...(toolCallId !== undefined ? { toolCallId } : {}),
        approved,
        ...(reason !== undefined ? { reason } : {}),
        version: expectedVersion(request.body.version, request.headers['if-match']),
      });
      return reply.code(202).send(workflowToWire(workflow));
    },
  );

  const reviewActions = {
    continue: {
      summary: 'Continue a paused pipeline with its next stage',
      description:
        'Accepts the result of the stage the pipeline paused at (a checkpoint, or a stage whose ' +
        'retries were used up) and runs the next stage.',
    },
    retry: {
      summary: 'Run the paused pipeline stage again, as it was',
      description: 'Re-runs the stage the pipeline paused at, with the same inputs.',
    },
  } as const;
  for (const [action, text] of Object.entries(reviewActions) as [
    keyof typeof reviewActions,
    (typeof reviewActions)[keyof typeof reviewActions],
  ][]) {
    app.post(
      `/workflows/:id/${action}`,
      {
        schema: {
          tags: ['workflows'],
          summary: text.summary,
          description: `${text.description} ${REVIEW_CONFLICTS}`,
          params: idParamsSchema,
          headers: actionHeaders,
          // Null when the request has no body at all (curl -X POST with nothing else).
          body: reviewBody.nullish(),
          response: { 202: workflowSchema, ...problemResponses(400, 401, 403, 404, 409, 429) },
        },
      },
      async (request, reply) => {
        const { tenant } = principalOf(request);
        const version = expectedVersion(request.body?.version, request.headers['if-match']);
        const workflow = await reviews[action](tenant.id, request.params.id, { version });
        return reply.code(202).send(workflowToWire(workflow));
      },
    );
  }

  app.post(
    '/workflows/:id/modify',
    {
      schema: {
        tags: ['workflows'],
        summary: 'Run the paused pipeline stage again with feedback',
        description:
          'Re-runs the stage the pipeline paused at with the feedback; with `plan`, the stages ' +
          'not yet run are replaced first, or dropped by an empty list (400 `invalid_plan` ' +
          'naming each problem). ' +
          REVIEW_CONFLICTS,
        params: idParamsSchema,
        headers: actionHeaders,
        body: modifyBody,
        response: { 202: workflowSchema, ...problemResponses(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const { tenant } = principalOf(request);
      const workflow = await reviews.modify(tenant.id, request.params.id, {
        feedback: request.body.feedback,
        ...(request.body.plan ? { plan: request.body.plan } : {}),
        version: expectedVersion(request.body.version, request.headers['if-match']),
      });
      return reply.code(202).send(workflowToWire(workflow));
    },
  );
};

/**
 * The version from the body, else from `If-Match` (`4`, `"4"` or `W/"4"`);
 * the two must agree when both are sent. `If-Match: *` matches any version
 * (RFC 9110), as no version does. Versions start at 1, as the body's.
 */
export function expectedVersion(
  fromBody: number | undefined,
  ifMatch: string | undefined,
): number | undefined {
  if (ifMatch === undefined || ifMatch.trim() === '*') return fromBody;
  const match = /^\s*(?:W\/)?"?([1-9]\d{0,8})"?\s*$/.exec(ifMatch);
  if (!match?.[1]) {
    throw badRequest('invalid_if_match', 'If-Match must be a workflow version, e.g. "4"', [
      { field: 'headers.if-match', message: 'a workflow version' },
    ]);
  }
  const fromHeader = Number(match[1]);
  if (fromBody !== undefined && fromBody !== fromHeader) {
    throw badRequest('version_mismatch', 'The body version and If-Match name different versions', [
      { field: 'body.version', message: `differs from If-Match (${fromHeader})` },
    ]);
  }
  return fromHeader;
}
