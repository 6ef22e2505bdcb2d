import { z } from 'zod';
import {
  AWAITING_REASONS,
  COMPLETION_REASONS,
  WORKFLOW_MODES,
  WORKFLOW_STATUSES,
  type Workflow,
} from '../../workflows/types.js';
import { requestedBudgetSchema, workflowBudgetSchema } from './budget-schemas.js';
import {
  hasNoNul,
  listPageFields,
  metadataSchema,
  modelNameSchema,
  NO_NUL_MESSAGE,
  pageSchema,
  sessionIdSchema,
} from './schemas.js';

/** Wire shapes of the workflow routes; the OpenAPI document names them. */

const MAX_INPUT_CHARS = 100_000;

/** Tokens and cost, of a workflow or of one pipeline stage attempt. */
export const usageSchema = z.object({
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  cachedInputTokens: z.number().int(),
  costUsd: z.number(),
});

export const workflowStatusSchema = z.enum(WORKFLOW_STATUSES).meta({ id: 'WorkflowStatus' });

export const createWorkflowBody = z
  .object({
    input: z
      .string()
      .min(1)
      .max(MAX_INPUT_CHARS)
      .refine(hasNoNul, NO_NUL_MESSAGE)
      .refine((text) => /\S/.test(text), 'must not be blank')
      .describe('The question or task'),
    sessionId: sessionIdSchema
      .optional()
      .describe(
        'Id of a session of the tenant (POST /v1/sessions): the workflow sees its history, and its question and answer are appended when it completes',
      ),
    mode: z
      .enum(WORKFLOW_MODES)
      .default('auto')
      .describe('auto: classified; simple: tool loop; complex: pipeline'),
    model: modelNameSchema
      .optional()
      .describe(
        'Catalogue name of the model; else the session’s, the tenant default, the system default',
      ),
    tools: z
      .array(z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'a tool name'))
      .max(64)
      .optional()
      .describe(
        'Names of the tools the workflow may use (all of the tenant’s when absent): built-ins, ' +
          'HTTP tools, `<server>__<tool>` of MCP servers; a name the tenant has no tool of ' +
          'answers 400 `unknown_tool`',
      ),
    metadata: metadataSchema('the workflow'),
    budget: requestedBudgetSchema.optional(),
  })
  .strict();

export const createWorkflowHeaders = z.looseObject({
  'idempotency-key': z
    .string()
    .min(1)
    .max(255)
    .regex(/^[\x21-\x7E]+$/, 'printable ASCII without spaces')
    .optional()
    .describe('Makes a retried create return the workflow the first attempt made'),
});

export const workflowLinksSchema = z
  .object({
    self: z.string(),
    events: z.string().describe('Server-sent events of the workflow'),
    cancel: z.string(),
  })
  .meta({ id: 'WorkflowLinks' });

export const createdWorkflowSchema = z
  .object({
    id: z.uuid(),
    status: workflowStatusSchema,
    version: z.number().int(),
    links: workflowLinksSchema,
  })
  .meta({ id: 'CreatedWorkflow' });

export const workflowSchema = z
  .object({
    id: z.uuid(),
    sessionId: z.string().nullable(),
    status: workflowStatusSchema,
    awaitingReason: z
      .enum(AWAITING_REASONS)
      .nullable()
      .describe('Why an awaiting_input workflow waits; null otherwise'),
    mode: z.enum(WORKFLOW_MODES),
    kind: z.enum(['simple', 'complex']).nullable().describe('Set by classification'),
    model: z.string(),
    input: z.string(),
    tools: z.array(z.string()),
    metadata: z.record(z.string(), z.unknown()),
    version: z
      .number()
      .int()
      .describe('Bumped by every transition; send it back to act on a paused workflow'),
    lastSeq: z.number().int().describe('Seq of the latest persisted event'),
    result: z
      .object({
        answer: z.string(),
        reason: z
          .enum(COMPLETION_REASONS)
          .describe(
            'Why the workflow ended: answered; a budget cap reached (iteration_cap, token_budget, cost_budget), ' +
              'the answer then being a best-effort one from what was gathered; context_exhausted, a partial answer; ' +
              'or cancelled: the text streamed before the cancel, kept on the cancelled workflow',
          ),
      })
      .nullable()
      .describe('The answer of a completed workflow; null otherwise'),
    error: z.object({ code: z.string(), message: z.string() }).nullable(),
    usage: usageSchema,
    budget: workflowBudgetSchema
      .nullable()
      .describe(
        'The caps this workflow runs under, resolved when it was created; null for workflows created before budgets existed, which run under the configured defaults',
      ),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
    startedAt: z.iso.datetime().nullable(),
    finishedAt: z.iso.datetime().nullable(),
    links: workflowLinksSchema,
  })
  .meta({ id: 'Workflow' });

export const listWorkflowsQuery = z
  .object({
    sessionId: sessionIdSchema.optional(),
    status: workflowStatusSchema.optional(),
    ...listPageFields,
  })
  .strict();

export const workflowPageSchema = pageSchema(workflowSchema, 'WorkflowPage');

export function workflowLinks(id: string): z.infer<typeof workflowLinksSchema> {
  const self = `/v1/workflows/${id}`;
  return { self, events: `${self}/events`, cancel: `${self}/cancel` };
}

export function createdWorkflowToWire(workflow: Workflow): z.infer<typeof createdWorkflowSchema> {
  return {
    id: workflow.id,
    status: workflow.status,
    version: workflow.version,
    links: workflowLinks(workflow.id),
  };
}

export function workflowToWire(workflow: Workflow): z.infer<typeof workflowSchema> {
  return {
    id: workflow.id,
    sessionId: workflow.sessionId,
    status: workflow.status,
    awaitingReason: workflow.awaitingReason,
    mode: workflow.mode,
    kind: workflow.kind,
    model: workflow.model,
    input: workflow.input,
    tools: workflow.tools,
    metadata: workflow.metadata,
    version: workflow.version,
    lastSeq: workflow.lastSeq,
    result: workflow.result,
    error: workflow.error,
    usage: workflow.usage,
    budget: workflow.budget,
    createdAt: workflow.createdAt.toISOString(),
    updatedAt: workflow.updatedAt.toISOString(),
    startedAt: workflow.startedAt?.toISOString() ?? null,
    finishedAt: workflow.finishedAt?.toISOString() ?? null,
    links: workflowLinks(workflow.id),
  };
}
