import { randomUUID } from 'node:crypto';
import { badRequest } from '../errors.js';
import { selectModel } from '../llm/model-selection.js';
import type { SessionHistoryStart } from '../sessions/service.js';
import { newLeaseOwner } from '../store/workflow-leases.js';
import type { NewWorkflowRow } from '../store/workflows.js';
import type { Principal } from '../tenancy/types.js';
import { resolveBudget } from './budget.js';
import type { NewWorkflow, WorkflowServiceOptions } from './service.js';

/** A new workflow's row leased to the run that starts with it. */
export type LeasedWorkflowRow = NewWorkflowRow & { lease: NonNullable<NewWorkflowRow['lease']> };

/** A create's checked row, and in a session the start of the workflow's history, read with the session. */
export interface CheckedWorkflow {
  row: LeasedWorkflowRow;
  historyStart?: SessionHistoryStart;
}

/**
 * How a create makes the row of a new workflow, its request checked: the
 * model (catalogue, tenant), the budget, the session and the tools. The
 * row is leased to the run this replica launches (a lease owner of its
 * own); the create adds the Idempotency-Key.
 */
export function checkedWorkflowRows(
  options: Pick<
    WorkflowServiceOptions,
    'catalogue' | 'budgetDefaults' | 'sessions' | 'unknownToolNames' | 'replicaId' | 'leaseMs'
  >,
) {
  const { catalogue } = options;
  return async (principal: Principal, input: NewWorkflow): Promise<CheckedWorkflow> => {
    const tenantId = principal.tenant.id;
    // A model the request names is checked first, before the session is read.
    const requested = input.model
      ? selectModel({ catalogue, tenant: principal.tenant, requested: input.model })
      : undefined;
    const budget = resolveBudget({
      defaults: options.budgetDefaults,
      tenant: principal.tenant.budget,
      requested: input.budget,
    });
    const found =
      input.sessionId === undefined
        ? undefined
        : await options.sessions.findForWorkflow(tenantId, input.sessionId);
    const session = found?.session;
    if (input.sessionId !== undefined && !session) throw unknownSession();
    const unknownTools = await options.unknownToolNames(tenantId, input.tools ?? []);
    if (unknownTools.length > 0) {
      throw badRequest(
        'unknown_tool',
        `The tools field names tools this tenant does not have: ${unknownTools.join(', ')}`,
        [
          {
            field: 'body.tools',
            message: `unknown tools: ${unknownTools.join(', ')}; the tenant's are listed by GET /v1/tools and GET /v1/mcp-servers (as server__tool)`,
          },
        ],
      );
    }
    const row: LeasedWorkflowRow = {
      id: randomUUID(),
      tenantId,
      // As the session's row spells it: an id in capitals names the same session.
      sessionId: session?.id ?? null,
      sessionSeq: found?.historyStart.throughSeq ?? null,
      mode: input.mode,
      model:
        requested ??
        selectModel({ catalogue, tenant: principal.tenant, session: session?.model ?? null }),
      input: input.input,
      tools: input.tools ?? [],
      metadata: input.metadata ?? {},
      budget,
      idempotencyKey: null,
      requestHash: null,
      lease: { owner: newLeaseOwner(options.replicaId), leaseMs: options.leaseMs },
    };
    return found ? { row, historyStart: found.historyStart } : { row };
  };
}

/** A create's sessionId names no session of its tenant (or one deleted before its insert). */
export function unknownSession() {
  return badRequest('unknown_session', 'The sessionId names no session of this tenant', [
    { field: 'body.sessionId', message: 'unknown session; create one with POST /v1/sessions' },
  ]);
}
