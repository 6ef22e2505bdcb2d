import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ExecutionPlan, toStoredPlan } from '../../src/orchestrator/pipeline/plan.js';
import type { DatabaseHandle } from '../../src/store/database.js';
import {
  loadPipelineRows,
  pipelineAfterReview,
  type ReviewWrite,
  reviewedRowsColumns,
} from '../../src/store/pipeline-rows.js';
import {
  acceptAfterTransition,
  beginAfterTransition,
  planRevisionAfterTransition,
} from '../../src/store/pipeline-transition-writes.js';
import { transitionWorkflow } from '../../src/workflows/transitions.js';
import { pipelineFixtures, plan } from '../support/pipeline-store.js';
import { createTenantDatabase, type TenantDatabase } from '../support/tenant-database.js';

/**
 * A review's rows: what the pipeline rows become after a review's
 * transition, computed from what the transition returned, against the rows
 * read after it.
 */

let testDb: TenantDatabase;
let handle: DatabaseHandle;

beforeAll(async () => {
  testDb = await createTenantDatabase({ poolMax: 4 });
  ({ handle } = testDb);
});
afterAll(async () => testDb?.close());

const { gathered } = pipelineFixtures(() => testDb);

describe('a review’s rows', () => {
  /** A paused workflow with the plan and a completed first stage, reviewed with `writes`. */
  async function review(
    writes: (key: { tenantId: string; workflowId: string }) => {
      alsoInStatement: ReturnType<typeof acceptAfterTransition>[];
      names: ReviewWrite[];
    },
  ) {
    const key = await gathered('facts');
    await handle.db
      .updateTable('workflows')
      .set({ status: 'awaiting_input', awaiting_reason: 'checkpoint' })
      .where('id', '=', key.workflowId)
      .execute();
    const before = await loadPipelineRows(handle.db, key);
    const { alsoInStatement, names } = writes(key);
    const result = await transitionWorkflow(handle.db, {
      ...key,
      to: 'running',
      fromAwaiting: ['checkpoint'],
      events: [],
      alsoInStatement,
      alsoSelect: reviewedRowsColumns(names),
      origin: 'test',
    });
    return {
      computed: pipelineAfterReview(before, result.also),
      read: await loadPipelineRows(handle.db, key),
    };
  }

  it('continue: the rows computed from what the transition returned are the rows read after it', async () => {
    const { computed, read } = await review(() => ({
      alsoInStatement: [
        acceptAfterTransition({ stageId: 'gather', attempt: 1 }),
        beginAfterTransition({
          stageId: 'write',
          attempt: 1,
          planRevision: 1,
          reason: 'first',
          feedback: null,
        }),
      ],
      names: ['accepted', 'begun'],
    }));
    expect(read.attempts[0]?.acceptedAt).toBeInstanceOf(Date);
    expect(read.attempts[1]).toMatchObject({ stageId: 'write', attempt: 1, status: 'started' });
    const { begun, ...rows } = computed;
    expect(begun).toEqual({ stageId: 'write', attempt: 1 });
    expect(rows).toEqual(read);
  });

  it('modify with a plan: the new revision and the begun attempt, as read after it', async () => {
    const patched: ExecutionPlan = { stages: [plan.stages[0] as ExecutionPlan['stages'][0]] };
    const { computed, read } = await review(() => ({
      alsoInStatement: [
        planRevisionAfterTransition({ revision: 2, plan: toStoredPlan(patched) }),
        beginAfterTransition({
          stageId: 'gather',
          attempt: 2,
          planRevision: 2,
          reason: 'user_modify',
          feedback: 'shorter',
        }),
      ],
      names: ['begun', 'revised'],
    }));
    expect(read.plan?.revision).toBe(2);
    expect(read.attempts.map((attempt) => [attempt.attempt, attempt.status])).toEqual([
      [1, 'completed'],
      [2, 'started'],
    ]);
    const { begun, ...rows } = computed;
    expect(begun).toEqual({ stageId: 'gather', attempt: 2 });
    expect(rows).toEqual(read);
  });

  it('a review that begins no attempt (the synthesis is next): none is said begun', async () => {
    const { computed, read } = await review(() => ({
      alsoInStatement: [acceptAfterTransition({ stageId: 'gather', attempt: 1 })],
      names: ['accepted'],
    }));
    expect(computed.begun).toBeUndefined();
    expect(computed).toEqual(read);
  });
});
