import { randomUUID } from 'node:crypto';
import { type ExecutionPlan, toStoredPlan } from '../../src/orchestrator/pipeline/plan.js';
import { type AttemptReason, pipelinesRepository } from '../../src/store/pipelines.js';
import type { TenantDatabase } from './tenant-database.js';

/**
 * What the pipeline store's tests share: a two-stage plan, a stage's usage,
 * and workflows of the database's tenant at the points the tests start from.
 */

/**
 * The lease owner of the run the fixtures' workflows are running under: a
 * run's plan and attempt writes name it (`heldBy`), as a real run's do.
 */
export const RUN = 'replica-a:0123456789abcdef';

export interface WorkflowKey {
  tenantId: string;
  workflowId: string;
}

export const usage = {
  inputTokens: 120,
  outputTokens: 40,
  cachedInputTokens: 100,
  costUsd: 0.00123,
};

export const plan: ExecutionPlan = {
  stages: [
    { id: 'gather', title: 'Gather', goal: 'Gather facts.', checkpoint: true },
    { id: 'write', title: 'Write', goal: 'Write it up.', checkpoint: false, dependsOn: ['gather'] },
  ],
};

/**
 * Fixtures over the test file's database, which is read when they are
 * called: the file's beforeAll creates it.
 */
export function pipelineFixtures(database: () => TenantDatabase) {
  const pipelines = () => pipelinesRepository(database().handle.db);

  /** A running workflow whose run (RUN) holds the lease. */
  async function newWorkflow(): Promise<WorkflowKey> {
    const { handle, tenantId } = database();
    const workflowId = randomUUID();
    await handle.db
      .insertInto('workflows')
      .values({
        id: workflowId,
        tenant_id: tenantId,
        status: 'running',
        mode: 'complex',
        model: 'scripted',
        input: 'Gather facts, then write them up.',
        tools: [],
        metadata: '{}',
        lease_owner: RUN,
        lease_expires_at: new Date(Date.now() + 60 * 60_000),
      })
      .execute();
    return { tenantId, workflowId };
  }

  /** Starts a stage's attempt as the run would: revision 1, no feedback unless given. */
  function start(
    key: WorkflowKey,
    stageId: string,
    attempt: number,
    extra: { reason?: AttemptReason; feedback?: string | null } = {},
  ) {
    return pipelines().startAttempt({
      ...key,
      heldBy: RUN,
      stageId,
      attempt,
      planRevision: 1,
      reason: extra.reason ?? 'first',
      feedback: extra.feedback ?? null,
    });
  }

  /** A workflow with the plan saved and the first stage's attempt 1 completed with `result`. */
  async function gathered(result: string): Promise<WorkflowKey> {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    await start(key, 'gather', 1);
    await pipelines().completeAttempt({
      ...key,
      heldBy: RUN,
      stageId: 'gather',
      attempt: 1,
      result,
      validation: { passed: true, findings: [] },
      usage,
    });
    return key;
  }

  return { pipelines, newWorkflow, start, gathered };
}
