import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.js';
import {
  bootstrapOperator,
  createTenant,
  startWorkflow,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

/**
 * A run writes the usage ledger's rows of its workflow's model calls in
 * its own statements, with the events that count their usage: one
 * transaction for both (the same xmin), not a write of the ledger's before
 * them, so a process that dies loses both or neither and the rows cost no
 * round trip of their own. The ledger's own flush (every 250 ms) leaves
 * them to the run, however long the run takes to write its next statement.
 */

let testApp: TestApp;
let tenant: TestTenant;

beforeAll(async () => {
  testApp = await startTestApp({ RATE_LIMIT_MAX: '100000' });
  const operatorKey = await bootstrapOperator(testApp);
  tenant = await createTenant(testApp, operatorKey, { name: 'ledger-statements' });
});
afterAll(async () => testApp?.close());

/** Each ledger row of the workflow, and whether a statement that wrote its events wrote it. */
async function ledgerRows(workflowId: string) {
  const { rows } = await testApp.services.database.pool.query<{
    attempt: number;
    with_events: boolean;
  }>(
    `SELECT c.attempt, EXISTS (
       SELECT 1 FROM workflow_events e
       WHERE e.workflow_id = c.workflow_id AND e.xmin::text = c.xmin::text
     ) AS with_events
     FROM llm_calls c WHERE c.workflow_id = $1 ORDER BY c.id`,
    [workflowId],
  );
  return rows;
}

async function completedCalls(workflowId: string): Promise<number> {
  const { rows } = await testApp.services.database.pool.query<{ count: number }>(
    `SELECT count(*)::int AS count FROM workflow_events
     WHERE workflow_id = $1 AND type = 'llm_call' AND status <> 'started'`,
    [workflowId],
  );
  return rows[0]?.count ?? 0;
}

describe('usage ledger rows in the run statements', () => {
  it.each([
    ['simple', 'What is the capital of France?'],
    ['complex', 'Compare the populations of France and Spain, then make a summary table'],
  ])(
    'a %s workflow: every call it counts has its row, written in the transaction of its events',
    async (mode, input) => {
      const ids = await Promise.all(
        [1, 2, 3].map((n) =>
          startWorkflow(testApp, tenant.key, { input: `${input} (${n})`, mode }),
        ),
      );
      // The complex ones pause at the checkpoint after their first stage.
      const ended = mode === 'simple' ? 'completed' : 'awaiting_input';
      let rows = 0;
      let withEvents = 0;
      for (const id of ids) {
        await waitForStatus(testApp, tenant.key, id, [ended], 20_000);
        const ledger = await ledgerRows(id);
        expect(ledger.length).toBe(await completedCalls(id));
        rows += ledger.length;
        withEvents += ledger.filter((row) => row.with_events).length;
      }
      expect(rows).toBeGreaterThanOrEqual(ids.length);
      expect(withEvents).toBe(rows);
    },
  );
});
