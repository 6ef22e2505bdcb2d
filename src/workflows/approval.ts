import { badRequest, notFound } from '../errors.js';
import type { Db } from '../store/database.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
import { workflowsRepository } from '../store/workflows.js';
import { toWorkflow } from './rows.js';
import { assertAwaiting, assertVersion } from './transitions.js';
import type { Workflow } from './types.js';

/** The user's decision on the tool call a workflow waits on (POST /v1/workflows/:id/approve). */
export interface ApprovalInput {
  /** The call decided on; the pending one when absent. */
  toolCallId?: string;
  approved: boolean;
  /** Why, told to the model with a refusal; kept with an approval too. */
  reason?: string;
  version?: number;
}

/**
 * The `tool_approval` event that records a decision on the call a
 * workflow paused for (awaiting_input, tool_approval), checked against the
 * `tool_approval_request` the workflow's row had seen: one call waits at a
 * time, and a decision naming another call is the client's mistake (400
 * `tool_call_not_pending`), never applied to the pending one. A client
 * that saw an earlier version is told so first (409 `stale_version`), as
 * a stale answer is. The caller resumes the workflow with the event
 * (service.ts `resume`), at the version returned.
 */
export async function approvalEvent(
  db: Db,
  key: { tenantId: string; id: string },
  input: ApprovalInput,
): Promise<{ event: NewEventRow; version: number }> {
  const row = await workflowsRepository(db).findById(key.tenantId, key.id);
  if (!row) throw notFound('Workflow');
  const paused: Workflow = toWorkflow(row);
  assertAwaiting(paused, ['tool_approval']);
  if (input.version !== undefined) assertVersion(paused, input.version);
  const requests = await workflowEventsRepository(db).listOfType({
    tenantId: key.tenantId,
    workflowId: key.id,
    type: 'tool_approval_request',
    throughSeq: paused.lastSeq,
  });
  const request = requests.at(-1);
  if (!request) throw new Error(`workflow ${key.id} awaits an approval it never asked for`);
  const pending = String(request.detail.toolCallId);
  if (input.toolCallId !== undefined && input.toolCallId !== pending) {
    const message = `The workflow waits for a decision on tool call "${pending}", not "${input.toolCallId}"`;
    throw badRequest('tool_call_not_pending', message, [{ field: 'body.toolCallId', message }]);
  }
  return {
    version: input.version ?? paused.version,
    event: {
      type: 'tool_approval',
      step: request.step,
      status: 'completed',
      detail: { toolCallId: pending, approved: input.approved, reason: input.reason ?? null },
      elapsedMs: null,
    },
  };
}
