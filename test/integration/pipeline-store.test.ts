import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nextAction } from '../../src/orchestrator/pipeline/next-action.js';
import {
  buildPipelineView,
  loadPipelineState,
} from '../../src/orchestrator/pipeline/pipeline-view.js';
import {
  type ExecutionPlan,
  parseStoredPlan,
  toStoredPlan,
} from '../../src/orchestrator/pipeline/plan.js';
import type { DatabaseHandle, DbOrTx } from '../../src/store/database.js';
import { loadPipelineRows } from '../../src/store/pipeline-rows.js';
import { INTERRUPTED, pipelinesRepository, type WorkflowKey } from '../../src/store/pipelines.js';
import { tenantsRepository } from '../../src/store/tenants.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import { lockWaiter } from '../support/database.js';
import { pipelineFixtures, plan, RUN, usage } from '../support/pipeline-store.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/** Plans and stage attempts in the store; a review's rows are in pipeline-store-reviews.test.ts. */

let testDb: TenantDatabase;
let handle: DatabaseHandle;
let otherTenantId: string;

beforeAll(async () => {
  testDb = await createTenantDatabase({ poolMax: 4 });
  ({ handle } = testDb);
  otherTenantId = (await tenantsRepository(handle.db).insert({ id: randomUUID(), name: 'other' }))
    .id;
});
afterAll(async () => testDb?.close());

const { pipelines, newWorkflow, start, gathered } = pipelineFixtures(() => testDb);

const policy = { maxValidationRetries: 1 };

/** The pipeline of a workflow still running, as `GET …/pipeline` shows it; undefined before its plan. */
async function viewOf(key: WorkflowKey) {
  const state = await loadPipelineState(handle.db, key);
  return state && buildPipelineView(state, policy, 'open');
}

/** The workflow's row as a cancel leaves it (the cancel's other writes aside). */
async function cancelWorkflow(db: DbOrTx, key: WorkflowKey): Promise<void> {
  await db
    .updateTable('workflows')
    .set({ status: 'cancelled', finished_at: new Date() })
    .where('id', '=', key.workflowId)
    .execute();
}

describe('plans', () => {
  it('a modify appends a revision; the current plan is the latest; another tenant sees none', async () => {
    const key = await newWorkflow();
    expect(
      (await loadPipelineRows(handle.db, { tenantId: key.tenantId, workflowId: key.workflowId }))
        .plan,
    ).toBeUndefined();
    expect(await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) })).toBe(1);
    const patched: ExecutionPlan = { stages: [plan.stages[0] as ExecutionPlan['stages'][0]] };
    expect(await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(patched) })).toBe(
      2,
    );

    const current = (
      await loadPipelineRows(handle.db, { tenantId: key.tenantId, workflowId: key.workflowId })
    ).plan;
    expect(current?.revision).toBe(2);
    expect(parseStoredPlan(current?.plan)).toEqual(patched);
    const revisions = await handle.db
      .selectFrom('workflow_plans')
      .select('revision')
      .where('workflow_id', '=', key.workflowId)
      .execute();
    expect(revisions.map((row) => row.revision).sort()).toEqual([1, 2]);
    expect(
      (await loadPipelineRows(handle.db, { tenantId: otherTenantId, workflowId: key.workflowId }))
        .plan,
    ).toBeUndefined();
  });
});

describe('stage attempts', () => {
  it('start and complete: result, validation, usage and timing are kept', async () => {
    const key = await newWorkflow();
    const attemptKey = { ...key, heldBy: RUN, stageId: 'gather', attempt: 1 };
    const started = await start(key, 'gather', 1);
    expect(started).toMatchObject({ status: 'started', reason: 'first', finishedAt: null });
    expect(started?.startedAt).toBeInstanceOf(Date);

    const completed = await pipelines().completeAttempt({
      ...attemptKey,
      result: 'Facts.',
      validation: { passed: true, findings: [] },
      usage,
    });
    expect(completed).toMatchObject({
      status: 'completed',
      result: 'Facts.',
      validation: { passed: true, findings: [] },
      usage,
      error: null,
    });
    expect(completed?.elapsedMs).toBeGreaterThanOrEqual(0);
    expect(completed?.finishedAt).toBeInstanceOf(Date);
    // Finished once: a second completion or failure changes nothing.
    expect(
      await pipelines().failAttempt({ ...attemptKey, error: { code: 'x', message: 'y' } }),
    ).toBeUndefined();
  });

  it('an attempt already started is not started again (no second run of one attempt)', async () => {
    const key = await newWorkflow();
    const [first, second] = await Promise.all([start(key, 'gather', 1), start(key, 'gather', 1)]);
    expect([first, second].filter(Boolean)).toHaveLength(1);
  });

  it('a failed validation is kept with its findings and retried under the next number', async () => {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    const attemptKey = { ...key, heldBy: RUN, stageId: 'gather', attempt: 1 };
    await start(key, 'gather', 1);
    const failed = await pipelines().failAttempt({
      ...attemptKey,
      result: '',
      validation: { passed: false, findings: ['The result is empty.'] },
      usage,
    });
    expect(failed).toMatchObject({ status: 'failed', error: null, result: '' });

    const state = await loadPipelineState(handle.db, key);
    if (!state) throw new Error('no pipeline');
    expect(nextAction(state.plan, state.attempts, policy)).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'gather' },
      attempt: 2,
      reason: 'validation_retry',
      findings: ['The result is empty.'],
    });
  });

  it('continue, then modify: the review begins the next attempt with the feedback', async () => {
    const key = await gathered('Facts.');
    expect((await viewOf(key))?.next).toBe('await_review');

    const begun = await pipelines().beginAttempt({
      ...key,
      stageId: 'gather',
      attempt: 2,
      planRevision: 1,
      reason: 'user_modify',
      feedback: 'Add sources.',
    });
    expect(begun).toMatchObject({ attempt: 2, status: 'started', feedback: 'Add sources.' });
    expect(begun?.startedAt).toBeInstanceOf(Date);
    // Begun: no other run starts it again.
    expect(await start(key, 'gather', 2, { reason: 'user_modify' })).toBeUndefined();
    await pipelines().completeAttempt({
      ...key,
      heldBy: RUN,
      stageId: 'gather',
      attempt: 2,
      result: 'Facts, with sources.',
      validation: { passed: true, findings: [] },
    });

    const accept = { ...key, stageId: 'gather', attempt: 2 };
    expect(await pipelines().acceptAttempt(accept)).toBe(true);
    expect(await pipelines().acceptAttempt(accept)).toBe(false);

    const view = await viewOf(key);
    expect(view).toMatchObject({ revision: 1, next: 'run_stage', currentStageId: 'write' });
    expect(view?.stages[0]).toMatchObject({
      id: 'gather',
      status: 'completed',
      result: 'Facts, with sources.',
    });
    expect(view?.stages[0]?.attempts.map((attempt) => [attempt.attempt, attempt.accepted])).toEqual(
      [
        [1, false],
        [2, true],
      ],
    );
  });

  it('a pending re-run, as reviews wrote them before they began it, is started by the run', async () => {
    const key = await gathered('Facts.');
    await handle.db
      .insertInto('workflow_stage_attempts')
      .values({
        workflow_id: key.workflowId,
        stage_id: 'gather',
        attempt: 2,
        tenant_id: key.tenantId,
        plan_revision: 1,
        status: 'pending',
        reason: 'user_modify',
        feedback: 'Add sources.',
      })
      .execute();
    const state = await loadPipelineState(handle.db, key);
    if (!state) throw new Error('no pipeline');
    const action = nextAction(state.plan, state.attempts, policy);
    expect(action).toMatchObject({
      kind: 'run_stage',
      attempt: 2,
      reason: 'user_modify',
      feedback: 'Add sources.',
      previousResult: 'Facts.',
    });
    expect(
      await start(key, 'gather', 2, { reason: 'user_modify', feedback: 'Add sources.' }),
    ).toMatchObject({ attempt: 2, status: 'started', feedback: 'Add sources.' });
  });

  it('a resumed run fails the cut-off attempt as interrupted and starts the next one', async () => {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    await start(key, 'gather', 1);
    // The replica dies here. Another one loads the rows:
    const state = await loadPipelineState(handle.db, key);
    if (!state) throw new Error('no pipeline');
    const action = nextAction(state.plan, state.attempts, policy);
    expect(action).toMatchObject({ kind: 'run_stage', attempt: 2, interruptedAttempt: 1 });
    const interrupted = await pipelines().failAttempt({
      ...key,
      heldBy: RUN,
      stageId: 'gather',
      attempt: 1,
      error: { code: INTERRUPTED, message: 'the replica running it stopped' },
    });
    expect(interrupted).toMatchObject({ status: 'failed', error: { code: 'interrupted' } });
    expect(await start(key, 'gather', 2, { reason: 'resumed' })).toMatchObject({
      attempt: 2,
      status: 'started',
    });
  });

  it('a finished workflow starts no attempt: 409 workflow_finished, and no row is written', async () => {
    const key = await newWorkflow();
    await cancelWorkflow(handle.db, key);
    await expect(start(key, 'gather', 1)).rejects.toMatchObject({ code: 'workflow_finished' });
    expect((await loadPipelineRows(handle.db, key)).attempts).toEqual([]);
  });

  it('a start that waited on a cancel’s row lock writes nothing once the cancel commits', async () => {
    const key = await newWorkflow();
    const attempts = () => loadPipelineRows(handle.db, key).then((rows) => rows.attempts);
    // Its outcome, taken as soon as it settles: it may be refused before the
    // commit below has answered this side.
    let refusal: Promise<unknown> | undefined;
    await handle.db.transaction().execute(async (tx) => {
      await cancelWorkflow(tx, key);
      refusal = start(key, 'gather', 1).then(
        (started) => ({ started }),
        (error: unknown) => error,
      );
      // Refused only if it is waiting for the cancel: it must not have written its row meanwhile.
      await lockWaiter(handle.pool);
    });
    expect(await refusal).toMatchObject({ code: 'workflow_finished' });
    expect(await attempts()).toEqual([]);
  });

  it('a cancel that waited on a start’s row lock fails the attempt the start wrote', async () => {
    const key = await newWorkflow();
    let cancelling: Promise<void> | undefined;
    await handle.db.transaction().execute(async (tx) => {
      await pipelinesRepository(tx).startAttempt({
        ...key,
        heldBy: RUN,
        stageId: 'gather',
        attempt: 1,
        planRevision: 1,
        reason: 'first',
        feedback: null,
      });
      cancelling = transitionWorkflow(handle.db, {
        ...key,
        to: 'cancelled',
        events: [],
        eventsUnderLock: async () => [],
        origin: 'test',
      }).then(() => undefined);
      await lockWaiter(handle.pool);
    });
    await cancelling;
    expect((await loadPipelineRows(handle.db, key)).attempts).toMatchObject([
      { stageId: 'gather', status: 'failed', error: { code: 'workflow_ended' } },
    ]);
  });

  it('is scoped by tenant: another tenant can neither read nor change the attempts', async () => {
    const key = await newWorkflow();
    const attemptKey = { ...key, heldBy: RUN, stageId: 'gather', attempt: 1 };
    await start(key, 'gather', 1);
    const other = { ...attemptKey, tenantId: otherTenantId };
    expect(
      (await loadPipelineRows(handle.db, { tenantId: otherTenantId, workflowId: key.workflowId }))
        .attempts,
    ).toEqual([]);
    expect(
      await pipelines().completeAttempt({
        ...other,
        result: 'x',
        validation: { passed: true, findings: [] },
      }),
    ).toBeUndefined();
    expect(await start({ ...key, tenantId: otherTenantId }, 'gather', 1)).toBeUndefined();
    expect(await viewOf({ ...key, tenantId: otherTenantId })).toBe(undefined);
    expect(
      (await loadPipelineRows(handle.db, { tenantId: key.tenantId, workflowId: key.workflowId }))
        .attempts,
    ).toHaveLength(1);
  });

  it('rows go with their workflow', async () => {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    await start(key, 'gather', 1);
    await handle.db.deleteFrom('workflows').where('id', '=', key.workflowId).execute();
    expect(
      (await loadPipelineRows(handle.db, { tenantId: key.tenantId, workflowId: key.workflowId }))
        .plan,
    ).toBeUndefined();
    expect(
      (await loadPipelineRows(handle.db, { tenantId: key.tenantId, workflowId: key.workflowId }))
        .attempts,
    ).toEqual([]);
  });
});
