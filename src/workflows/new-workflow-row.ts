import { randomUUID } from 'node:crypto';
import { badRequest } from '../errors.js';
import { selectModel } from '../llm/model-selection.js';
import type { NewWorkflowRow } from '../store/workflows.js';
import type { Principal } from '../tenancy/types.js';
import { resolveBudget } from './budget.js';
import type { NewWorkflow, WorkflowServiceOptions } from './service.js';

/**
 * How a create makes the row of a new workflow, its request checked: the
 * model (catalogue, tenant), the budget, the session and the tools. The
 * row is leased to this replica, which launches its run; the create adds
 * the Idempotency-Key.
 */
export function checkedWorkflowRows(
  options: Pick<
    WorkflowServiceOptions,
    'catalogue' | 'budgetDefaults' | 'sessions' | 'unknownToolNames' | 'replicaId' | 'leaseMs'
  >,
) {
  const { catalogue } = options;
  return async (principal: Principal, input: NewWorkflow): Promise<NewWorkflowRow> => {
    const tenantId = principal.tenant.id;
    const model = selectModel({
      catalogue,
      tenant: principal.tenant,
      requested: input.model ?? null,
    });
    const budget = resolveBudget({
      defaults: options.budgetDefaults,
      tenant: principal.tenant.budget,
      requested: input.budget,
    });
    if (
      input.sessionId !== undefined &&
      !(await options.sessions.exists(tenantId, input.sessionId))
    ) {
      throw badRequest('unknown_session', 'The sessionId names no session of this tenant', [
        {
          field: 'body.sessionId',
          message: 'unknown session; create one with POST /v1/sessions',
        },
      ]);
    }
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
    return {
      id: randomUUID(),
      tenantId,
      sessionId: input.sessionId ?? null,
      mode: input.mode,
      model,
      input: input.input,
      tools: input.tools ?? [],
      metadata: input.metadata ?? {},
      budget,
      idempotencyKey: null,
      requestHash: null,
      lease: { owner: options.replicaId, leaseMs: options.leaseMs },
    };
  };
}
