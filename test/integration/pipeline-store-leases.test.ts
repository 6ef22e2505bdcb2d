import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toStoredPlan } from '../../src/orchestrator/pipeline/plan.js';
import type { DbOrTx } from '../../src/store/database.js';
import { loadPipelineRows } from '../../src/store/pipeline-rows.js';
import { LeaseLostError } from '../../src/store/workflow-leases.js';
import { lockWaiter } from '../support/database.js';
import { pipelineFixtures, plan, RUN, type WorkflowKey } from '../support/pipeline-store.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * A run's plan and stage-attempt writes name its lease owner (`heldBy`):
 * they are made while it holds the workflow's lease, and refused with
 * LeaseLostError, writing nothing, once another take of the lease replaced
 * it, even one that commits while the write waits for the row.
 */

let testDb: TenantDatabase;

beforeAll(async () => {
  testDb = await createTenantDatabase({ poolMax: 4 });
});
afterAll(async () => testDb?.close());

const { pipelines, newWorkflow } = pipelineFixtures(() => testDb);

const TAKEOVER = 'replica-b:fedcba9876543210';

/**
 * A takeover, as the sweep's claim or a review writes it: another owner on
 * the row; or none, as a pause or a hand-over leaves it.
 */
async function leaseTo(db: DbOrTx, key: WorkflowKey, owner: string | null): Promise<void> {
  await db
    .updateTable('workflows')
    .set({ lease_owner: owner })
    .where('id', '=', key.workflowId)
    .execute();
}

const attemptsOf = async (key: WorkflowKey) =>
  (await loadPipelineRows(testDb.handle.db, key)).attempts.map(
    (a) => `${a.stageId}/${a.attempt}:${a.status}`,
  );

const startAs = (key: WorkflowKey, heldBy: string, attempt = 1) =>
  pipelines().startAttempt({
    ...key,
    heldBy,
    stageId: 'gather',
    attempt,
    planRevision: 1,
    reason: 'first',
    feedback: null,
  });

const completeAs = (key: WorkflowKey, heldBy: string) =>
  pipelines().completeAttempt({
    ...key,
    heldBy,
    stageId: 'gather',
    attempt: 1,
    result: 'Facts.',
    validation: { passed: true, findings: [] },
  });

describe('a run’s pipeline writes and its lease', () => {
  it('are made while the run holds the lease', async () => {
    const key = await newWorkflow();
    expect(await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) })).toBe(1);
    expect(await startAs(key, RUN)).toMatchObject({ status: 'started' });
    expect(await completeAs(key, RUN)).toMatchObject({ status: 'completed' });
    expect(await startAs(key, RUN, 2)).toMatchObject({ status: 'started' });
    expect(
      await pipelines().failAttempt({
        ...key,
        heldBy: RUN,
        stageId: 'gather',
        attempt: 2,
        error: { code: 'x', message: 'y' },
      }),
    ).toMatchObject({ status: 'failed' });
  });

  it('are refused with LeaseLostError once the lease was taken over, and write nothing', async () => {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    await startAs(key, RUN);
    await leaseTo(testDb.handle.db, key, TAKEOVER);

    await expect(
      pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    await expect(completeAs(key, RUN)).rejects.toBeInstanceOf(LeaseLostError);
    await expect(
      pipelines().failAttempt({
        ...key,
        heldBy: RUN,
        stageId: 'gather',
        attempt: 1,
        error: { code: 'x', message: 'y' },
      }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    await expect(startAs(key, RUN, 2)).rejects.toBeInstanceOf(LeaseLostError);

    const rows = await loadPipelineRows(testDb.handle.db, key);
    expect(rows.plan?.revision).toBe(1);
    expect(await attemptsOf(key)).toEqual(['gather/1:started']);
  });

  it('a released lease (a pause, a hand-over) refuses them too', async () => {
    const key = await newWorkflow();
    await pipelines().savePlan({ ...key, heldBy: RUN, plan: toStoredPlan(plan) });
    await leaseTo(testDb.handle.db, key, null);
    await expect(startAs(key, RUN)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await attemptsOf(key)).toEqual([]);
  });

  it('an end that waited on a takeover’s row lock is refused once the takeover commits', async () => {
    const key = await newWorkflow();
    await startAs(key, RUN);
    let ending: Promise<unknown> | undefined;
    await testDb.handle.db.transaction().execute(async (tx) => {
      await leaseTo(tx, key, TAKEOVER);
      ending = completeAs(key, RUN).then(
        (ended) => ({ ended }),
        (error: unknown) => error,
      );
      // Refused only if it waits for the takeover: it must not have read the old owner meanwhile.
      await lockWaiter(testDb.handle.pool);
    });
    expect(await ending).toBeInstanceOf(LeaseLostError);
    expect(await attemptsOf(key)).toEqual(['gather/1:started']);
  });
});
